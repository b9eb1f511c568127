// The Python package `stoker` (python/stoker, built into <build>/python) run by Debian's python3 and
// torch 1.13: real training loops and real peers (DataLoader, DistributedSampler, a Gloo DDP job),
// each scenario a script in tests/python that asserts as it goes and prints its figures as the last
// line of stdout, read here.
#include <QtTest>

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include "test_support.h"

namespace {

struct Run {
  int exitCode = -1;
  bool crashed = false;
  QByteArray out, err;
};

#ifndef STOKER_BATCHES_MODULE
#define STOKER_BATCHES_MODULE 0
#endif

Run runScript(const QString& script, int timeoutMs) {
  QProcess p;
  QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
  // Whether the build made the extension stoker._batches: the scripts check that it loads (or not).
  e.insert("STOKER_EXPECT_BATCHES_MODULE", STOKER_BATCHES_MODULE ? "1" : "0");
  e.remove("STOKER_PYTHON_CTYPES");
  e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON ":" STOKER_SOURCE_DIR "/tests/python"));
  e.insert("PYTHONDONTWRITEBYTECODE", "1");
  e.insert("OMP_NUM_THREADS", "1");
  e.remove("STOKER_PUBLISH");
  e.insert("STOKER_CLI", QStringLiteral(STOKER_CLI_PATH));
  p.setProcessEnvironment(e);
  p.start(QStringLiteral(STOKER_PYTHON), {QStringLiteral(STOKER_SOURCE_DIR "/tests/python/") + script});
  p.waitForStarted(10000);
  p.closeWriteChannel();
  if (!p.waitForFinished(timeoutMs)) p.kill(), p.waitForFinished(5000);
  Run r;
  r.crashed = p.exitStatus() == QProcess::CrashExit;
  r.exitCode = p.state() == QProcess::NotRunning ? p.exitCode() : -1;
  r.out = p.readAllStandardOutput();
  r.err = p.readAllStandardError();
  return r;
}

QJsonObject figures(const Run& r) {
  const auto lines = r.out.trimmed().split('\n');
  return lines.isEmpty() ? QJsonObject() : QJsonDocument::fromJson(lines.last()).object();
}

#define RUN_SCRIPT(var, script, ms)                                                              \
  const Run var = runScript(QStringLiteral(script), ms);                                         \
  QVERIFY2(!var.crashed && var.exitCode == 0, (QByteArray(script " failed:\n") + var.out.right(2000) + \
                                               "\n" + var.err.right(4000)).constData())

}  // namespace

class TestPythonPackage : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    if (!stoker::test::pythonTorchAvailable()) QSKIP("Debian's python3-torch is not installed (the set-up installs it)");
  }

  // import stoker from the build tree names its version and the torch it was built for.
  void importsFromTheBuildTree() {
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert("PYTHONPATH", QStringLiteral(STOKER_BUILD_PYTHON));
    p.setProcessEnvironment(e);
    p.start(QStringLiteral(STOKER_PYTHON),
            {"-c", "import stoker, torch; print(stoker.__version__, stoker._native.build_info()['torch'], torch.__version__)"});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    QVERIFY(p.readAllStandardOutput().startsWith("0."));
  }

  // A CNN through stoker.Loader and through DataLoader with the same seed: same batches, same losses
  // for 50 steps; two epochs through Stoker reach >= 85 % test accuracy.
  void trainsLikeDataLoader() {
    RUN_SCRIPT(r, "train_parity.py", 280000);
    const QJsonObject f = figures(r);
    QCOMPARE(f["steps_equal"].toInt(), 50);
    QVERIFY2(f["accuracy"].toDouble() >= 0.85, QByteArray::number(f["accuracy"].toDouble()).constData());
    QCOMPARE(f["batches"].toInt(), 2 * 938);
  }

  // A 3-rank Gloo DDP job killed after step 40, resumed from the loader's state on 2 ranks.
  void ddpResumesOnAnotherWorldSize() {
    RUN_SCRIPT(r, "ddp_resume.py", 280000);
    const QJsonObject f = figures(r);
    QCOMPARE(f["samples"].toInt(), 60000);
    QCOMPARE(f["first_run"].toInt(), 40 * 50 * 3);
  }

  // publish= and STOKER_PUBLISH send the core's records (source "stoker", stages, name, rank).
  void publishesTelemetry() {
    RUN_SCRIPT(r, "telemetry.py", 120000);
    QVERIFY(figures(r)["staged"].toInt() > 0);
    QVERIFY(figures(r)["env_records"].toInt() > 0);
  }

  // Unequal GPUs: weighted steps and El Che through the planner, and a weighted resume.
  void unequalRanksFollowThePlan() {
    RUN_SCRIPT(r, "unequal_ranks.py", 120000);
    QCOMPARE(figures(r)["resumed"].toInt(), 3000);
  }

  // Unknown specs and keywords, missing folders, corrupt JPEGs, Ctrl-C, abandoned iterators,
  // fork, a module built for another torch.
  void badUseIsAnError() {
    RUN_SCRIPT(r, "bad_use.py", 280000);
    const QJsonObject f = figures(r);
    QVERIFY(f["cases"].toInt() >= 13);
    QVERIFY(f["ctrl_c_latency_s"].toDouble() < 1.0);
  }

  // The extension stoker._batches and the ctypes path hand over the same batches (values, strides,
  // indices, state), and neither overwrites a batch Python holds.
  void bothBatchPathsAgree() {
    RUN_SCRIPT(r, "batch_paths.py", 120000);
    if (STOKER_BATCHES_MODULE) QVERIFY(figures(r)["batches_compared"].toInt() > 600);
  }

  // Real photos: eval batches equal the export's and torchvision's, train batches the export's for
  // the same seed, and resnet18 trains on them.
  void imageFolderMatchesExportAndTorchvision() {
    RUN_SCRIPT(r, "image_folder.py", 200000);
    const QJsonObject f = figures(r);
    QCOMPARE(f["steps"].toInt(), 20);
    QVERIFY(f["eval_worst_levels"].toDouble() <= 1.0);
  }

  // The workbench's "Python (stoker)" export runs as pasted and serves Stoker's samples.
  void exportedSnippetServesStokersSamples() {
    RUN_SCRIPT(r, "export_snippet.py", 120000);
    QCOMPARE(figures(r)["samples"].toInt(), 60000);
  }

  // Checkpoints, the planner and the tuner in process.
  void checkpointsPlansAndTuning() {
    RUN_SCRIPT(r, "ckpt_tune.py", 200000);
    QVERIFY(figures(r)["progress_calls"].toInt() > 0);
    QVERIFY(figures(r)["tune_trials"].toInt() > 0);
  }
};

QTEST_GUILESS_MAIN(TestPythonPackage)
#include "tst_python_package.moc"
