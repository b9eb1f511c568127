// `stoker ckpt convert|verify` as users and scripts see them: exit status,
// JSON, one-line errors that leave DST untouched, a full disk and a crash
// followed by --resume, several cooperating processes, and interop with
// Debian's PyTorch (strided .pt views in, bf16 rounding, torch.load out).
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QThread>

#include <filesystem>

#include "ckpt_fixtures.h"
#include "io/safetensors_file.h"
#include "test_support.h"

using stoker::test::runPython;
using stoker::test::runStoker;
using stoker::test::TensorMap;
namespace fs = std::filesystem;

namespace {

const char* kBenchGenerator = STOKER_SOURCE_DIR "/tests/bench/make_ranks_checkpoint.py";

QStringList entries(const QString& dir) {
  QStringList names;
  for (const auto& e : fs::directory_iterator(dir.toStdString())) names << QString::fromStdString(e.path().filename().string());
  names.sort();
  return names;
}

}  // namespace

class TestCliConvert : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString tmp(const QString& n) const { return dir_.filePath(n); }

  // exit 2, exactly one stderr line containing `expected`, DST not created.
  void expectRefused(const QStringList& args, const QString& expected, const QString& dst) {
    auto r = runStoker(args);
    QVERIFY(!r.crashed);
    QCOMPARE(r.exitCode, 2);
    const QString err = QString::fromUtf8(r.err);
    QCOMPARE(err.count('\n'), 1);
    QVERIFY2(err.startsWith("error: ") && err.contains(expected), qPrintable(err));
    if (!dst.isEmpty()) QVERIFY2(!fs::exists(dst.toStdString()), qPrintable(dst + " was created"));
  }

 private Q_SLOTS:
  void initTestCase() {
    auto r = runPython(QString("import runpy, sys; sys.argv = ['gen', sys.argv[1], '--ranks', '8', '--size-mib', '64'];"
                               " runpy.run_path('%1', run_name='__main__')").arg(kBenchGenerator),
                       {tmp("r8")});
    QVERIFY2(r.exitCode == 0, r.err.constData());
  }

  void dryRunShowsThePlanAndWritesNothing() {
    auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("dry"), "--to", "ranks:3", "--dry-run", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(doc["source_format"].toString(), QString("ranks"));
    QJsonArray files = doc["files"].toArray();
    QCOMPARE(files.size(), 3);
    double sum = 0;
    for (const auto& f : files) {
      QVERIFY(f.toObject()["bytes"].toDouble() > 0);
      QVERIFY(f.toObject()["reads"].toArray().size() >= 3);  // 8 inputs spread over 3 outputs
      sum += f.toObject()["bytes"].toDouble();
    }
    QCOMPARE(doc["total_bytes"].toDouble(), sum);
    QCOMPARE(doc["index"].toString(), QString("metadata.json"));
    QVERIFY(!fs::exists(tmp("dry").toStdString()));
    auto table = runStoker({"ckpt", "convert", tmp("r8"), tmp("dry"), "--to", "hf:10MB", "--dry-run"});
    QCOMPARE(table.exitCode, 0);
    QVERIFY(table.out.contains("model-00001-of-"));
  }

  // Without --jobs: a byte-moving conversion writes up to 4 files at once even on 2 cores; one
  // that converts dtypes uses the cores; neither asks for more jobs than the budget has room for.
  void defaultJobsFollowTheWork() {
    const int cores = std::max(2, QThread::idealThreadCount());
    auto jobs = [&](QStringList extra) {
      auto r = runStoker(QStringList{"ckpt", "convert", tmp("r8"), tmp("dry"), "--dry-run", "--json"} + extra);
      return r.exitCode == 0 ? QJsonDocument::fromJson(r.out).object()["memory"].toObject()["jobs"].toInt() : -1;
    };
    QCOMPARE(jobs({"--to", "ranks:3"}), std::max(cores, 3));
    QCOMPARE(jobs({"--to", "ranks:8"}), std::max(cores, 4));
    QCOMPARE(jobs({"--to", "single"}), cores);
    QCOMPARE(jobs({"--to", "ranks:3", "--dtype", "bf16"}), cores);
    QCOMPARE(jobs({"--to", "ranks:3", "--memory-budget", "16MiB"}), 2);
    // A DCP item is written in one piece: each job may hold a tensor whole besides its 8 MiB.
    QCOMPARE(jobs({"--to", "dcp:3", "--memory-budget", "16MiB"}), 1);
    QCOMPARE(jobs({"--to", "ranks:3", "--jobs", "1"}), 1);
  }

  void convertThenVerify() {
    auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("r3"), "--to", "ranks:3", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QVERIFY(doc["complete"].toBool());
    QCOMPARE(doc["written"].toArray().size(), 3);
    QVERIFY(r.err.contains("converting 100.0%"));  // the progress line (not a terminal: plain lines)
    QCOMPARE(entries(tmp("r3")), (QStringList{"metadata.json", "rank_0.safetensors", "rank_1.safetensors",
                                              "rank_2.safetensors"}));
    auto v = runStoker({"ckpt", "verify", tmp("r8"), tmp("r3")});
    QCOMPARE(v.exitCode, 0);
    QVERIFY(v.out.startsWith("equal: "));
    auto inspect = runStoker({"ckpt", "inspect", tmp("r3"), "--json"});
    QCOMPARE(inspect.exitCode, 0);
    QJsonObject info = QJsonDocument::fromJson(inspect.out).object();
    QCOMPARE(info["format"].toString(), QString("ranks"));
    QCOMPARE(info["world_size"].toInt(), 3);
    for (const auto& t : info["tensors"].toArray())
      if (t.toObject()["name"] == "norm.weight") QVERIFY(t.toObject()["shard_dim"].isNull());
  }

  void verifyNamesTheFirstDifference() {
    TensorMap a{{"x", at::ones({4})}, {"y", at::zeros({3})}};
    TensorMap b{{"x", at::ones({4})}, {"y", at::tensor({0.0f, 0.0f, 1e-30f})}};
    stoker::test::writeSingle(tmp("va").toStdString(), a);
    stoker::test::writeRanks(tmp("vb").toStdString(), b, 2);
    auto r = runStoker({"ckpt", "verify", tmp("va"), tmp("vb")});
    QCOMPARE(r.exitCode, 1);
    QCOMPARE(QString::fromUtf8(r.out), QString("different: tensor \"y\": values differ\n"));
    auto j = runStoker({"ckpt", "verify", tmp("va"), tmp("vb"), "--json"});
    QCOMPARE(j.exitCode, 1);
    QCOMPARE(QJsonDocument::fromJson(j.out).object()["first_difference"].toObject()["tensor"].toString(), QString("y"));
  }

  void badInputIsOneLineAndWritesNothing() {
    // Metadata contradicting the shards.
    fs::copy(tmp("r8").toStdString(), tmp("r8_missing").toStdString());
    fs::remove(tmp("r8_missing/rank_5.safetensors").toStdString());
    expectRefused({"ckpt", "convert", tmp("r8_missing"), tmp("o1"), "--to", "ranks:2"}, "rank_5.safetensors is missing",
                  tmp("o1"));
    auto inspect = runStoker({"ckpt", "inspect", tmp("r8_missing"), "--json"});
    QCOMPARE(inspect.exitCode, 2);  // still prints what it found, problems included
    QVERIFY(QJsonDocument::fromJson(inspect.out).object()["problems"].toArray().size() >= 1);
    // Destination rules.
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("r8/sub"), "--to", "single"}, "inside the source checkpoint",
                  tmp("r8/sub"));
    fs::create_directories(tmp("taken").toStdString());
    stoker::test::writeSingle(tmp("taken").toStdString(), {{"z", at::ones({1})}});
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("taken"), "--to", "single"}, "pass --force", "");
    QCOMPARE(entries(tmp("taken")), QStringList{"model.safetensors"});
    QCOMPARE(runStoker({"ckpt", "convert", tmp("r8"), tmp("taken"), "--to", "single", "--force"}).exitCode, 0);
    // A dtype the target cannot hold is refused before DST is touched: with --force, DST's old
    // outputs were deleted first, then the .pt writer refused the tensor and left a journal.
    const QString u16 = stoker::test::samplesDir() + "/H.safetensors";
    expectRefused({"ckpt", "convert", u16, tmp("taken"), "--to", "pt", "--force"},
                  "has dtype U16, which torch.save (1.13) cannot store", "");
    QCOMPARE(entries(tmp("taken")), QStringList{"model.safetensors"});
    expectRefused({"ckpt", "convert", u16, tmp("o7"), "--to", "pt"}, "pick another --dtype", tmp("o7"));
    // Options.
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("o2"), "--to", "ranks:two"}, "--to ranks:two", tmp("o2"));
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("o3"), "--to", "single", "--memory-budget", "lots"},
                  "is not a size", tmp("o3"));
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("o4"), "--to", "single", "--rank", "2", "--world-size", "2"},
                  "--rank 2", tmp("o4"));
    expectRefused({"ckpt", "convert", tmp("r8"), tmp("o5"), "--to", "single", "--dtype", "f8"}, "--dtype f8", tmp("o5"));
    expectRefused({"ckpt", "convert", tmp("nothing"), tmp("o6"), "--to", "single"}, "no such file", tmp("o6"));
  }

  void diskFullLeavesNoPartialFileAndResumes() {
    // 64 MiB of tensors to 4 ranks; the "disk" fills after 40 MiB.
    auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("full"), "--to", "ranks:4", "--jobs", "1"},
                          {"STOKER_FAULT_ENOSPC_AFTER=41943040"});
    QCOMPARE(r.exitCode, 2);
    const QString err = QString::fromUtf8(r.err).trimmed().split('\n').last();
    QVERIFY2(err.contains("No space left on device") && err.contains("--resume"), qPrintable(err));
    QStringList names = entries(tmp("full"));
    QVERIFY(names.contains(".stoker-journal"));
    QVERIFY(!names.contains("metadata.json"));
    int complete = 0;
    for (const auto& n : names) {
      QVERIFY2(!n.contains("stoker-tmp"), qPrintable(n));
      if (n.startsWith("rank_")) {
        stoker::SafetensorsFile::open(tmp("full/" + n).toStdString());  // whole and valid, or absent
        ++complete;
      }
    }
    QCOMPARE(complete, 2);  // 16 MiB per output: two fit in 40 MiB
    auto resumed = runStoker({"ckpt", "convert", tmp("r8"), tmp("full"), "--to", "ranks:4", "--resume", "--json"});
    QCOMPARE(resumed.exitCode, 0);
    QJsonObject doc = QJsonDocument::fromJson(resumed.out).object();
    QCOMPARE(doc["already_done"].toArray().size(), 2);
    QCOMPARE(doc["written"].toArray().size(), 2);
    QCOMPARE(runStoker({"ckpt", "verify", tmp("r8"), tmp("full")}).exitCode, 0);
    QVERIFY(!entries(tmp("full")).contains(".stoker-journal"));
  }

  // A full disk while writing a .pt: libtorch's zip writer used to throw from its destructor
  // (std::terminate, SIGABRT and a stack trace; found by tests/soak/convert_faults.py).
  void diskFullWritingPtIsAnError() {
    auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("fullpt"), "--to", "pt"}, {"STOKER_FAULT_ENOSPC_AFTER=3000000"});
    QVERIFY2(!r.crashed && r.exitCode == 2, r.err.constData());
    const QStringList lines = QString::fromUtf8(r.err).trimmed().split('\n');
    QVERIFY2(lines.last().startsWith("error: ") && lines.last().contains("No space left on device"), r.err.constData());
    for (const auto& n : entries(tmp("fullpt"))) QVERIFY2(n == ".stoker-journal", qPrintable(n));
    QCOMPARE(runStoker({"ckpt", "convert", tmp("r8"), tmp("fullpt"), "--to", "pt", "--resume"}).exitCode, 0);
    QCOMPARE(runStoker({"ckpt", "verify", tmp("r8"), tmp("fullpt")}).exitCode, 0);
  }

  void crashThenResume() {
    auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("crash"), "--to", "hf:20MB", "--jobs", "1"},
                          {"STOKER_FAULT_CRASH_AFTER=30000000"});
    QVERIFY(r.crashed || r.exitCode != 0);
    QStringList names = entries(tmp("crash"));
    bool leftover = false;
    for (const auto& n : names) leftover |= n.contains("stoker-tmp");
    QVERIFY2(leftover, qPrintable(names.join(' ')));  // a real crash leaves its temporary file
    QVERIFY(!names.contains("model.safetensors.index.json"));
    // Without --resume the half-done directory is refused...
    auto again = runStoker({"ckpt", "convert", tmp("r8"), tmp("crash"), "--to", "hf:20MB"});
    QCOMPARE(again.exitCode, 2);
    QVERIFY(again.err.contains("--resume"));
    // ...with it, the stale temporary goes and the rest is written.
    auto resumed = runStoker({"ckpt", "convert", tmp("r8"), tmp("crash"), "--to", "hf:20MB", "--resume"});
    QCOMPARE(resumed.exitCode, 0);
    for (const auto& n : entries(tmp("crash"))) QVERIFY2(!n.contains("stoker-tmp"), qPrintable(n));
    QCOMPARE(runStoker({"ckpt", "verify", tmp("r8"), tmp("crash")}).exitCode, 0);
  }

  // --resume of a finished conversion is a no-op for every target. A .pt's size is known only once
  // written, so by the planned sizes a finished --to pt was "no journal to resume" (exit 2). A kill
  // while the journal goes leaves part of it: once its DCP item logs were gone with the plan still
  // there, every --resume failed; the plan now goes first, and what is left is no journal.
  void resumingAFinishedConversionIsANoOp() {
    const QString src = stoker::test::samplesDir() + "/f.safetensors";
    for (const QString to : {"pt", "dcp"}) {
      const QString dst = tmp("finished-" + to);
      QCOMPARE(runStoker({"ckpt", "convert", src, dst, "--to", to}).exitCode, 0);
      if (to == "dcp") {  // killed while the journal went: its plan first, then (here) nothing else
        QVERIFY(QDir().mkpath(dst + "/.stoker-journal"));
        QVERIFY(stoker::test::writeFile(dst + "/.stoker-journal/done-host-1", "12 __0_0.distcp\n"));
      }
      const auto again = runStoker({"ckpt", "convert", src, dst, "--to", to, "--resume"});
      QVERIFY2(again.exitCode == 0 && again.out.contains("already finished"), again.err.constData());
      QCOMPARE(runStoker({"ckpt", "verify", src, dst}).exitCode, 0);
    }
    // A .pt cut below its data's bytes after it finished is not taken as finished.
    QVERIFY(QFile::resize(tmp("finished-pt/model.pt"), 8));
    const auto cut = runStoker({"ckpt", "convert", src, tmp("finished-pt"), "--to", "pt", "--resume"});
    QVERIFY2(cut.exitCode == 2 && cut.err.contains("a finished conversion removes its journal"), cut.err.constData());
  }

  void cooperatingProcesses() {
    // Three real processes share the outputs of one conversion.
    std::vector<std::unique_ptr<QProcess>> procs;
    for (int rank = 0; rank < 3; ++rank) {
      auto p = std::make_unique<QProcess>();
      p->start(STOKER_CLI_PATH, {"ckpt", "convert", tmp("r8"), tmp("coop"), "--to", "ranks:5", "--rank",
                                 QString::number(rank), "--world-size", "3", "--json"});
      procs.push_back(std::move(p));
    }
    int completes = 0, written = 0;
    for (auto& p : procs) {
      QVERIFY(p->waitForFinished(120000));
      QCOMPARE(p->exitCode(), 0);
      QJsonObject doc = QJsonDocument::fromJson(p->readAllStandardOutput()).object();
      completes += doc["complete"].toBool() ? 1 : 0;
      written += doc["written"].toArray().size();
    }
    QCOMPARE(written, 5);
    QVERIFY(completes >= 1);
    QCOMPARE(runStoker({"ckpt", "verify", tmp("r8"), tmp("coop")}).exitCode, 0);
    QVERIFY(!entries(tmp("coop")).contains(".stoker-journal"));
    // torchrun's environment works the same way.
    for (int rank : {1, 0}) {
      auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("coop_env"), "--to", "ranks:2"},
                            {"RANK=" + QString::number(rank), "WORLD_SIZE=2"});
      QCOMPARE(r.exitCode, 0);
    }
    QCOMPARE(entries(tmp("coop_env")), (QStringList{"metadata.json", "rank_0.safetensors", "rank_1.safetensors"}));
    // A broken environment is refused with the variable named, DST untouched.
    for (const auto& [env, message] : QList<QPair<QStringList, QByteArray>>{
             {{"RANK=x", "WORLD_SIZE=2"}, "RANK: \"x\" is not a whole number"},
             {{"RANK=2", "WORLD_SIZE=2"}, "RANK: 2 is not a rank of WORLD_SIZE 2"},
             {{"RANK=0"}, "WORLD_SIZE: is not set"}}) {
      auto r = runStoker({"ckpt", "convert", tmp("r8"), tmp("coop_bad"), "--to", "ranks:2"}, env);
      QVERIFY2(r.exitCode == 2 && r.err.contains(message), qPrintable(env.join(' ') + ": " + r.err));
      QVERIFY(!QFileInfo::exists(tmp("coop_bad")));
    }
  }

  void torchInterop() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    // Strided views, a slice of a shared storage, a transposed matrix; f32 with
    // values that exercise bf16/f16 rounding ties.
    auto gen = runPython(R"(
import sys, torch
torch.manual_seed(0)
base = torch.randn(40, 30) * 100
sd = {'t': base.t(), 'slice': base[5:9], 'col': base[:, 3], 'plain': torch.randn(1000),
      'ties': torch.tensor([1.00390625, 1.01171875, -3.0078125, 65519.0, 1e-40]), 'ids': torch.arange(5)}
torch.save(sd, sys.argv[1])
)", {tmp("views.pt")});
    QVERIFY2(gen.exitCode == 0, gen.err.constData());
    for (const char* dtype : {"bf16", "f16", "keep"}) {
      const QString out = tmp(QString("interop_") + dtype);
      auto r = runStoker({"ckpt", "convert", tmp("views.pt"), out, "--to", "single", "--dtype", dtype});
      QVERIFY2(r.exitCode == (QString(dtype) == "f16" ? 1 : 0), r.err.constData());  // 65519 overflows f16
      if (QString(dtype) == "f16") QVERIFY(r.err.contains("exceed the F16 range"));
      auto check = runPython(R"(
import json, sys, torch
sd = torch.load(sys.argv[1])
want = {'bf16': torch.bfloat16, 'f16': torch.float16, 'keep': None}[sys.argv[3]]
with open(sys.argv[2] + '/model.safetensors', 'rb') as f:
    n = int.from_bytes(f.read(8), 'little'); header = json.loads(f.read(n)); data = f.read()
names = {'F32': torch.float32, 'BF16': torch.bfloat16, 'F16': torch.float16, 'I64': torch.int64}
for k, v in sd.items():
    e = header[k]; a, b = e['data_offsets']
    got = torch.frombuffer(bytearray(data[a:b]), dtype=names[e['dtype']]).reshape(e['shape'])
    exp = v if (want is None or not v.is_floating_point()) else v.to(want)
    assert got.dtype == exp.dtype and torch.equal(got, exp), k
    assert got.view(-1).view(torch.uint8).tolist() == exp.contiguous().view(-1).view(torch.uint8).tolist(), k
print('ok')
)", {tmp("views.pt"), out, dtype});
      QVERIFY2(check.exitCode == 0 && check.out.contains("ok"), check.err.constData());
    }
    // .pt out: torch.load reads it and it equals the source.
    QCOMPARE(runStoker({"ckpt", "convert", tmp("views.pt"), tmp("pt_out"), "--to", "pt"}).exitCode, 0);
    auto load = runPython(R"(
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2] + '/model.pt')
assert set(a) == set(b)
for k in a: assert torch.equal(a[k], b[k]), k
print('ok')
)", {tmp("views.pt"), tmp("pt_out")});
    QVERIFY2(load.exitCode == 0, load.err.constData());
  }
};

QTEST_GUILESS_MAIN(TestCliConvert)
#include "tst_cli_convert.moc"
