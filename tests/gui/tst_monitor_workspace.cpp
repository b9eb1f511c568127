// The Monitor workspace: listens for telemetry from several ranks at once,
// keeps one table row per rank and device with its input-bound verdict,
// plots every rank's device, follows a telemetry file (skipping bad lines),
// reports a bad address readably, and shows the demo trainer end to end.
#include <QtTest>

#include <QSignalSpy>
#include <QTableWidget>

#include "event_loop_probe.h"
#include "wait_for.h"
#include "monitor_workspace.h"
#include "telemetry/telemetry_publisher.h"
#include "telemetry/telemetry_record.h"
#include "telemetry_plots.h"
#include "telemetry_source.h"
#include "test_support.h"

using namespace stoker;
using stoker::test::EventLoopProbe;
using stoker::test::saveScreenshot;
using stoker::test::waitFor;
using stoker::test::waitForCount;
using stoker::test::waitUntil;

namespace {

TelemetryRecord record(int rank, const std::string& device, double waitMs, double stepMs, double time) {
  TelemetryRecord r;
  r.time = time;
  r.host = "node";
  r.pid = 100 + rank;
  r.rank = rank;
  r.device = device;
  r.step = 5;
  r.steps_total = 100;
  r.samples_per_s = 1000 * (rank + 1);
  r.data_wait_ms = waitMs;
  r.step_ms = stepMs;
  r.mode = "resident";
  r.prefetch_depth = 4;
  r.mem_total = 1 << 30;
  return r;
}

}  // namespace

class TestMonitorWorkspace : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);
  }

  void classifiesEveryRankFromManyPublishers() {
    MonitorWorkspace w;
    w.resize(1100, 700);
    w.show();
    QSignalSpy listening(&w, &MonitorWorkspace::listening);
    w.setAddress("127.0.0.1:0");
    w.listen();
    QVERIFY(waitUntil([&] { return !listening.isEmpty(); }));
    const std::string address = "127.0.0.1:" + std::to_string(w.port());
    EventLoopProbe probe;
    probe.start();
    {
      // Three ranks, each its own connection: fine (1 %), moderate (10 %), input-bound (30 %).
      TelemetryPublisher r0({address}), r1({address}), r2({address});
      const double now = 1.7e9;
      for (int i = 0; i < 20; ++i) {
        r0.onRecord(record(0, "cuda:0", 0.1, 9.9, now + i * 0.05));
        r1.onRecord(record(1, "cuda:0", 1.0, 9.0, now + i * 0.05));
        r2.onRecord(record(2, "cuda:1", 3.0, 7.0, now + i * 0.05));
        r2.onRecord(record(2, "cuda:0", 0.0, 10.0, now + i * 0.05));
        QTest::qWait(5);
      }
      for (auto* p : {&r0, &r1, &r2}) p->flush(2000);
    }
    QVERIFY2(waitUntil([&] { return w.table()->rowCount() == 4 && w.verdict(2, "cuda:1") == "input-bound"; }),
             qPrintable(w.statusText()));
    probe.stop();
    QCOMPARE(w.verdict(0, "cuda:0"), QString("fine"));
    QCOMPARE(w.verdict(1, "cuda:0"), QString("moderate"));
    QCOMPARE(w.verdict(2, "cuda:1"), QString("input-bound"));
    QCOMPARE(w.verdict(2, "cuda:0"), QString("fine"));
    QCOMPARE(w.table()->item(0, 0)->text(), QString("0"));  // ordered by rank
    QCOMPARE(w.table()->item(3, 1)->text(), QString("cuda:1"));
    QCOMPARE(w.plots()->series().size(), 4);
    QVERIFY(w.plots()->series().contains("rank 2 cuda:1"));
    QVERIFY2(w.statusText().contains("3 connection(s)") || w.statusText().contains("0 connection(s)"), qPrintable(w.statusText()));
    qInfo("longest event-loop gap: %lld ms", probe.worstMs());
    QVERIFY2(probe.worstMs() < stoker::test::stallBudgetMs(),
             qPrintable(QString("the event loop stalled %1 ms").arg(probe.worstMs())));
    saveScreenshot(&w, "monitor-workspace");
    QSignalSpy stopped(w.source(), &BackgroundJob::stopped);
    w.stop();
    QVERIFY(waitUntil([&] { return !stopped.isEmpty(); }));
  }

  void followsAFileAndSkipsBadLines() {
    const QString path = dir_.filePath("telemetry.jsonl");
    QByteArray text = QByteArray::fromStdString(telemetryToJson(record(0, "sim:0", 5, 5, 1.7e9))) + "\n";
    text += "this is not telemetry\n";
    QVERIFY(test::writeFile(path, text));
    MonitorWorkspace w;
    w.followFile(path);
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 1; }));
    QCOMPARE(w.verdict(0, "sim:0"), QString("input-bound"));
    QVERIFY(waitUntil([&] { return w.source()->badLines() == 1; }));
    // Appended records arrive, a line written in two parts included.
    QFile f(path);
    QVERIFY(f.open(QIODevice::Append));
    const QByteArray more = QByteArray::fromStdString(telemetryToJson(record(1, "sim:1", 0.1, 20, 1.7e9 + 1))) + "\n";
    f.write(more.left(20));
    f.flush();
    QTest::qWait(250);
    f.write(more.mid(20));
    f.close();
    QVERIFY(waitUntil([&] { return w.table()->rowCount() == 2; }));
    QCOMPARE(w.verdict(1, "sim:1"), QString("fine"));
    QCOMPARE(w.source()->badLines(), 1);
    w.stop();
  }

  void badAddressesAndFilesAreReadableErrors() {
    MonitorWorkspace w;
    QSignalSpy failed(&w, &MonitorWorkspace::failed);
    w.setAddress("no-port-here");
    w.listen();
    QVERIFY(waitUntil([&] { return !failed.isEmpty(); }));
    QVERIFY2(failed.last().at(0).toString().contains("no-port-here"), qPrintable(failed.last().at(0).toString()));
    QVERIFY(w.statusText().startsWith("Error:"));
    w.followFile(dir_.filePath("missing.jsonl"));
    QVERIFY(waitUntil([&] { return failed.size() == 2; }));
    QVERIFY(failed.last().at(0).toString().contains("missing.jsonl"));
  }

  void demoTrainerShowsUpEndToEnd() {
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") &&
        !QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte"))
      QSKIP("Debian's dataset-fashion-mnist is not installed");
    MonitorWorkspace w;
    QSignalSpy listening(&w, &MonitorWorkspace::listening);
    w.setAddress("127.0.0.1:0");
    w.listen();
    QVERIFY(waitUntil([&] { return !listening.isEmpty(); }));
    QProcess trainer;
    trainer.start(STOKER_TRAINER_PATH, {"--epochs", "1", "--max-steps", "60", "--publish",
                                         QString("127.0.0.1:%1").arg(w.port())});
    QVERIFY(trainer.waitForStarted());
    QVERIFY2(waitUntil([&] { return w.table()->rowCount() == 1; }, 60000), qPrintable(w.statusText()));
    QVERIFY(trainer.waitForFinished(120000));
    QCOMPARE(trainer.exitCode(), 0);
    const QByteArray out = trainer.readAllStandardOutput();
    QVERIFY2(out.contains("rank 0 epoch 0: loss"), out.constData());
    QCOMPARE(w.table()->item(0, 1)->text(), QString("cpu"));
    QVERIFY(!w.verdict(0, "cpu").isEmpty());
    w.stop();
  }
};

QTEST_MAIN(TestMonitorWorkspace)
#include "tst_monitor_workspace.moc"
