// PyTorch Distributed Checkpoints (DCP) as sources: real checkpoints written by
// Debian's torch 1.13 (one process, and a 2-process Gloo job saving
// ShardedTensors in dim-0 shards and a 2x2 grid of boxes), the same checkpoint
// re-pickled in torch 2.x's layout (and with zstd items, as torch >= 2.6 compresses; also a tensor
// in two column halves), every conversion target verified against
// the torch.save'd original, and every malformed input refused with one line
// and nothing written. Fixtures: tests/ckpt/dcp_fixtures.py. Also the other
// checkpoints torch 2.x writes: a .pt with storages 1.13 lacks, aligned records
// (tests/ckpt/pt_torch2_fixture.py).
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QCryptographicHash>
#include <QMap>

#include <filesystem>
#include <fstream>
#include <optional>
#include <cstring>

#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "io/dcp_metadata.h"
#include "test_support.h"
#include "util/error.h"

using stoker::test::run;
using stoker::test::runStoker;
namespace fs = std::filesystem;

namespace {
// rchar: every byte this process has read through read(2) and pread(2), page cache or not;
// nothing where /proc/self/io is not readable.
std::optional<std::uint64_t> bytesReadByThisProcess() {
  std::ifstream in("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value)
    if (key == "rchar:") return value;
  return std::nullopt;
}

const char* kFixtures = STOKER_SOURCE_DIR "/tests/ckpt/dcp_fixtures.py";
const char* kTorchLoad = STOKER_SOURCE_DIR "/tests/ckpt/dcp_load.py";
const char* kPtTorch2 = STOKER_SOURCE_DIR "/tests/ckpt/pt_torch2_fixture.py";
// Checkpoints written by PyTorch 2.11's own writers (dcp.save, FSDP2 on one rank, torch.save,
// safetensors), committed with expected.json: tests/fixtures/torch2/make_fixtures.py.
const QString kRealTorch2 = QStringLiteral(STOKER_SOURCE_DIR "/tests/fixtures/torch2");

// expected.json's torch dtype names as safetensors spells them.
QString safetensorsDtype(const QString& torchName) {
  static const QMap<QString, QString> names{{"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"},
                                            {"int64", "I64"},   {"int32", "I32"}, {"uint8", "U8"},
                                            {"float64", "F64"}, {"bool", "BOOL"}};
  return names.value(torchName, "?" + torchName);
}

// Every tensor of a .safetensors file as "DTYPE [shape] sha256", by name: what expected.json says
// of each tensor, read independently of Stoker's reader.
QMap<QString, QString> safetensorsDigests(const QString& path) {
  QFile f(path);
  QMap<QString, QString> out;
  if (!f.open(QIODevice::ReadOnly)) return out;
  const QByteArray all = f.readAll();
  if (all.size() < 8) return out;
  quint64 headerBytes = 0;
  std::memcpy(&headerBytes, all.constData(), 8);
  const QJsonObject header = QJsonDocument::fromJson(all.mid(8, static_cast<qsizetype>(headerBytes))).object();
  const qsizetype base = 8 + static_cast<qsizetype>(headerBytes);
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const QJsonObject t = it.value().toObject();
    const QJsonArray range = t["data_offsets"].toArray();
    QStringList shape;
    for (const auto& d : t["shape"].toArray()) shape << QString::number(d.toInteger());
    const QByteArray bytes = all.mid(base + range[0].toInteger(), range[1].toInteger() - range[0].toInteger());
    out[it.key()] = t["dtype"].toString() + " [" + shape.join(',') + "] " +
                    QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex();
  }
  return out;
}

// expected.json's record of one fixture, in safetensorsDigests' form.
QMap<QString, QString> expectedDigests(const QString& fixture) {
  QFile f(kRealTorch2 + "/expected.json");
  QMap<QString, QString> out;
  if (!f.open(QIODevice::ReadOnly)) return out;
  const QJsonObject tensors = QJsonDocument::fromJson(f.readAll()).object()["fixtures"].toObject()[fixture].toObject();
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const QJsonObject t = it.value().toObject();
    QStringList shape;
    for (const auto& d : t["shape"].toArray()) shape << QString::number(d.toInteger());
    out[it.key()] = safetensorsDtype(t["dtype"].toString()) + " [" + shape.join(',') + "] " + t["sha256"].toString();
  }
  return out;
}
}

class TestCkptDcp : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString tmp(const QString& n) const { return dir_.filePath(n); }

  static stoker::test::ProcessResult fixtures(const QStringList& args) {
    return run(QStringLiteral(STOKER_PYTHON), QStringList{kFixtures} + args);
  }

 private Q_SLOTS:
  void initTestCase() {
    if (!stoker::test::pythonTorchAvailable()) QSKIP("Debian's python3-torch is not installed");
    for (const QStringList& args : {QStringList{"single", tmp("single")}, QStringList{"sharded", tmp("sharded"), "2"},
                                    QStringList{"torch2", tmp("single"), tmp("torch2")},
                                    QStringList{"torch2zstd", tmp("single"), tmp("torch2zstd")},
                                    QStringList{"bad", tmp("sharded"), tmp("bad")}, QStringList{"view", tmp("view")},
                                    QStringList{"columns", tmp("columns")},
                                    QStringList{"torch2zstd", tmp("columns"), tmp("columns-zstd")}}) {
      auto r = fixtures(args);
      QVERIFY2(r.exitCode == 0, (args.join(' ').toUtf8() + ": " + r.err).constData());
    }
  }

  void readsOneProcessCheckpoint() {
    auto info = stoker::inspectCheckpoint(tmp("single").toStdString());
    QCOMPARE(info.format, stoker::CheckpointFormat::Dcp);
    QCOMPARE(info.tensors.size(), std::size_t{9});
    QVERIFY(info.problems.empty());
    const auto* head = info.find("model.head.weight");
    QVERIFY(head);
    QCOMPARE(head->shape, (std::vector<std::int64_t>{4, 6}));
    QVERIFY2(head->pieces.at(0).strided, "a transposed parameter keeps its strides in its item");
    QCOMPARE(info.find("model.layers.0.bias")->dtype, stoker::Dtype::BF16);
    QCOMPARE(info.find("model.scale")->shape, std::vector<std::int64_t>{});
    QCOMPARE(info.nonTensorItems.size(), std::size_t{2});
    QCOMPARE(QString::fromStdString(info.metadata.at("dcp_modules")).left(34),
             QString("torch.distributed._shard.checkpoin"));
  }

  // torch 1.13 writes a file per item: reading must not hold them all open (a soft limit of 10
  // descriptors, below the 11 data files of this checkpoint).
  void readsMoreFilesThanTheDescriptorLimit() {
    auto r = run("/bin/bash", {"-c", "ulimit -Sn 10 && exec \"$0\" ckpt verify \"$1\" \"$2\"", STOKER_CLI_PATH,
                               tmp("single"), tmp("single-reference.pt")});
    QVERIFY2(r.exitCode == 0, (r.out + r.err).constData());
    QVERIFY(QDir(tmp("single")).entryList({"*.distcp"}).size() > 10);
  }

  void readsShardedGlooJob() {
    auto r = runStoker({"ckpt", "inspect", tmp("sharded"), "--json"});
    QCOMPARE(r.exitCode, 0);
    const QJsonObject doc = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(doc["format"].toString(), QString("dcp"));
    QMap<QString, QJsonArray> chunks;
    for (const auto& v : doc["tensors"].toArray()) {
      const QJsonObject t = v.toObject();
      chunks[t["name"].toString()] = t["chunks"].toArray();
    }
    QCOMPARE(chunks["model.big.weight"].size(), 2);
    QCOMPARE(chunks["model.uneven"].size(), 2);
    QCOMPARE(chunks["model.replicated"].size(), 1);
    // The 2x2 grid: boxes split on both dims, from two ranks' files.
    QSet<QString> boxes, files;
    for (const auto& v : chunks["model.grid"]) {
      const QJsonObject c = v.toObject();
      const auto o = c["offsets"].toArray(), s = c["sizes"].toArray();
      boxes << QString("%1,%2+%3x%4").arg(o[0].toInt()).arg(o[1].toInt()).arg(s[0].toInt()).arg(s[1].toInt());
      files << QFileInfo(c["file"].toString()).fileName().left(3);
    }
    QCOMPARE(boxes, (QSet<QString>{"0,0+3x6", "0,6+3x4", "3,0+3x6", "3,6+3x4"}));
    QCOMPARE(files, (QSet<QString>{"__0", "__1"}));
    QCOMPARE(doc["non_tensor_items"].toArray().size(), 1);
  }

  void convertsToEveryTarget_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("reference");
    QTest::addColumn<QString>("target");
    for (const char* src : {"single", "sharded", "torch2", "torch2zstd"})
      for (const char* to : {"single", "ranks:3", "hf:1KB", "pt", "ranks:1"})
        QTest::newRow((QString(src) + " -> " + to).toUtf8())
            << QString(src) << (QString(src).startsWith("torch2") ? "single" : QString(src)) << to;
  }
  void convertsToEveryTarget() {
    QFETCH(QString, source);
    QFETCH(QString, reference);
    QFETCH(QString, target);
    const QString dst = tmp("out-" + source + "-" + QString(target).replace(':', '_'));
    auto c = runStoker({"ckpt", "convert", tmp(source), dst, "--to", target, "--jobs", "2"});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    QVERIFY2(c.err.contains("non-tensor item(s) are left out"), c.err.constData());
    auto v = runStoker({"ckpt", "verify", dst, tmp(reference + "-reference.pt")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
    QVERIFY(v.out.startsWith("equal:"));
    // The DCP source holds non-tensor items too: verify says it did not compare them.
    auto s = runStoker({"ckpt", "verify", tmp(source), tmp(reference + "-reference.pt")});
    QVERIFY2(s.exitCode == 0 && s.out.contains("\nnot compared: ") && s.out.contains("non-tensor items"),
             (s.out + s.err).constData());
  }

  // A dtype change from DCP rounds as from the same tensors in a .pt.
  void convertsDtypeLikeThePtSource() {
    auto a = runStoker({"ckpt", "convert", tmp("sharded"), tmp("dtype-dcp"), "--to", "single", "--dtype", "bf16"});
    QVERIFY2(a.exitCode == 0, a.err.constData());
    auto b = runStoker({"ckpt", "convert", tmp("sharded-reference.pt"), tmp("dtype-pt"), "--to", "single", "--dtype", "bf16"});
    QVERIFY2(b.exitCode == 0, b.err.constData());
    auto v = runStoker({"ckpt", "verify", tmp("dtype-dcp"), tmp("dtype-pt")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
    auto differs = runStoker({"ckpt", "verify", tmp("dtype-dcp"), tmp("sharded-reference.pt")});
    QCOMPARE(differs.exitCode, 1);  // bf16 really changed the F32 tensors
  }

  void includeAndExcludeSelectTensors() {
    auto c = runStoker({"ckpt", "convert", tmp("single"), tmp("weights"), "--to", "single", "--exclude", "optim.*"});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    auto info = stoker::inspectCheckpoint(tmp("weights").toStdString());
    QCOMPARE(info.tensors.size(), std::size_t{8});
    QVERIFY(!info.find("optim.state.0.exp_avg"));
    auto only = runStoker({"ckpt", "convert", tmp("single"), tmp("layers"), "--to", "pt", "--include", "model.layers.*",
                           "--include", "*.scale"});
    QVERIFY2(only.exitCode == 0, only.err.constData());
    QCOMPARE(stoker::inspectCheckpoint(tmp("layers").toStdString()).tensors.size(), std::size_t{3});
    auto none = runStoker({"ckpt", "convert", tmp("single"), tmp("none"), "--to", "single", "--include", "nothing.*"});
    QCOMPARE(none.exitCode, 2);
    QVERIFY2(none.err.contains("select none of the 9 tensors"), none.err.constData());
    QVERIFY(!QFileInfo::exists(tmp("none")));
  }

  // --to dcp[:M]: what Stoker writes, torch's own DCP reader loads (torch 1.13's, pointed at the
  // torch 2.x module paths Stoker writes), resharding it onto whole tensors, equal to the original.
  void writesDcpThatTorchLoads_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("reference");
    QTest::addColumn<QString>("target");
    QTest::newRow("dcp 1.13 one process -> dcp:3") << "single" << "single" << "dcp:3";
    QTest::newRow("dcp Gloo job -> dcp") << "sharded" << "sharded" << "dcp";
    QTest::newRow("dcp Gloo job -> dcp:5") << "sharded" << "sharded" << "dcp:5";
    QTest::newRow("dcp torch 2.x layout -> dcp:2") << "torch2" << "single" << "dcp:2";
    QTest::newRow("dcp zstd items (torch >= 2.6) -> dcp:2") << "torch2zstd" << "single" << "dcp:2";
    QTest::newRow(".pt -> dcp:2") << "sharded-reference.pt" << "sharded" << "dcp:2";
  }
  void writesDcpThatTorchLoads() {
    QFETCH(QString, source);
    QFETCH(QString, reference);
    QFETCH(QString, target);
    const QString dst = tmp("dcp-" + source + "-" + QString(target).replace(':', '_'));
    auto c = runStoker({"ckpt", "convert", tmp(source), dst, "--to", target});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    QVERIFY(QFileInfo::exists(dst + "/.metadata"));
    QVERIFY2(!QFileInfo::exists(dst + "/.stoker-journal"), "the journal and item logs go once .metadata is written");
    auto load = run(QStringLiteral(STOKER_PYTHON), {kTorchLoad, dst, tmp(reference + "-reference.pt")});
    QVERIFY2(load.exitCode == 0, (load.out + load.err).constData());
    const QJsonObject r = QJsonDocument::fromJson(load.out).object();
    QVERIFY(r["different"].toArray().isEmpty());
    // Only the classes torch >= 2.3 keeps DCP's metadata in, plus torch's own helpers.
    for (const auto& g : r["globals"].toArray())
      QVERIFY2(g.toString().startsWith("torch.distributed.checkpoint.") || g.toString().startsWith("torch ") ||
                   g.toString() == "torch.serialization _get_layout" || g.toString() == "builtins getattr",
               g.toString().toUtf8().constData());
    const int ranks = target.contains(':') ? target.section(':', 1).toInt() : 1;
    QCOMPARE(r["chunks"].toObject()[reference == "single" ? "model.embed.weight" : "model.big.weight"].toInt(), ranks);
    if (reference == "single") QCOMPARE(r["chunks"].toObject()["model.scale"].toInt(), 1);  // a scalar is held once
    // Stoker reads its own output back: every tensor equal.
    auto v = runStoker({"ckpt", "verify", dst, tmp(reference + "-reference.pt")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
  }

  // A crash half-way leaves no .metadata (DCP's readers see no checkpoint); --resume finishes it.
  void resumesAnInterruptedDcpWrite() {
    const QString dst = tmp("dcp-crash");
    auto crashed = runStoker({"ckpt", "convert", tmp("sharded"), dst, "--to", "dcp:4", "--jobs", "1"},
                             {"STOKER_FAULT_CRASH_AFTER=600000"});
    QVERIFY(crashed.crashed || crashed.exitCode != 0);
    QVERIFY(!QFileInfo::exists(dst + "/.metadata"));
    auto resumed = runStoker({"ckpt", "convert", tmp("sharded"), dst, "--to", "dcp:4", "--resume"});
    QVERIFY2(resumed.exitCode == 0, resumed.err.constData());
    auto load = run(QStringLiteral(STOKER_PYTHON), {kTorchLoad, dst, tmp("sharded-reference.pt")});
    QVERIFY2(load.exitCode == 0, (load.out + load.err).constData());
    auto again = runStoker({"ckpt", "convert", tmp("sharded"), dst, "--to", "dcp:4", "--resume"});
    QVERIFY2(again.exitCode == 0, again.err.constData());  // finished: nothing to do
    // With the journal gone, --resume trusts only a .metadata that lists every planned item where
    // its file holds it: a shard cut short, or a .metadata that is not the plan's, is refused.
    QFile shard(dst + "/__1_0.distcp");
    const qint64 full = shard.size();
    QVERIFY(shard.resize(full - 1));
    auto cut = runStoker({"ckpt", "convert", tmp("sharded"), dst, "--to", "dcp:4", "--resume"});
    QCOMPARE(cut.exitCode, 2);
    QVERIFY2(cut.err.contains("a finished conversion removes its journal"), cut.err.constData());
    QVERIFY(shard.resize(full));
    auto otherPlan = runStoker({"ckpt", "convert", tmp("sharded"), dst, "--to", "dcp:3", "--resume"});
    QCOMPARE(otherPlan.exitCode, 2);
    QVERIFY2(otherPlan.err.contains("a finished conversion removes its journal"), otherPlan.err.constData());
  }

  // An item that torch.save'd a view holds the view's whole storage (16 MiB for a 32 KiB chunk),
  // read whole to gather the chunk: the memory budget counts it, and a big enough one converts it.
  void memoryBudgetCountsAStridedItemsStorage() {
    auto tight = runStoker({"ckpt", "convert", tmp("view"), tmp("view-tight"), "--to", "single", "--jobs", "1",
                            "--memory-budget", "16MiB"});
    QCOMPARE(tight.exitCode, 2);
    QVERIFY2(tight.err.contains("\"model.narrow.weight\" must be held whole") &&
                 tight.err.contains("stored strided in the source"),
             tight.err.constData());
    QVERIFY(!QFileInfo::exists(tmp("view-tight") + "/model.safetensors"));
    auto roomy = runStoker({"ckpt", "convert", tmp("view"), tmp("view-roomy"), "--to", "single", "--jobs", "1",
                            "--memory-budget", "32MiB"});
    QVERIFY2(roomy.exitCode == 0, roomy.err.constData());
    auto v = runStoker({"ckpt", "verify", tmp("view-roomy"), tmp("view-reference.pt")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
  }

  // A tensor split along dim 1 (tensor parallelism's row-parallel weights) has every row in each of
  // its items. Compressed items are decompressed whole, once per output tensor: holding only the
  // last one loaded decompressed an item for every row (2,048 times here; an 8 MiB tensor took
  // 31 s). Counted as the bytes this process reads (/proc/self/io), not timed.
  void columnSplitZstdItemsAreReadOnce() {
    const std::string src = tmp("columns-zstd").toStdString();
    std::uint64_t sourceBytes = 0;
    for (const auto& e : fs::directory_iterator(src)) sourceBytes += fs::file_size(e.path());
    stoker::CheckpointInfo info = stoker::inspectCheckpoint(src);
    stoker::requireConsistent(info);
    const auto plan = stoker::planReshard(info, stoker::parseTargetSpec("single", "keep"));
    const auto before = bytesReadByThisProcess();
    QVERIFY2(before, "/proc/self/io has no rchar: the bytes read cannot be counted");
    QVERIFY(stoker::convertCheckpoint(info, plan, tmp("columns-single").toStdString(), {}).complete);
    const std::uint64_t read = bytesReadByThisProcess().value_or(0) - *before;
    qInfo("read %llu bytes converting %llu bytes of items", static_cast<unsigned long long>(read),
          static_cast<unsigned long long>(sourceBytes));
    QVERIFY2(read < 2 * sourceBytes + (1 << 20), qPrintable(QString("read %1 bytes").arg(read)));
    auto v = runStoker({"ckpt", "verify", tmp("columns-single"), tmp("columns-reference.pt")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
  }

  // DCP -> DCP keeps the non-tensor items (step counters, RNG states) byte for byte; zstd-compressed
  // ones are written decompressed, so readers without the zstandard module load them.
  void dcpToDcpKeepsNonTensorItems_data() {
    QTest::addColumn<QString>("source");
    QTest::newRow("plain items") << "single";
    QTest::newRow("zstd items") << "torch2zstd";
  }
  void dcpToDcpKeepsNonTensorItems() {
    QFETCH(QString, source);
    const QString dst = tmp("dcp-items-" + source);
    auto c = runStoker({"ckpt", "convert", tmp(source), dst, "--to", "dcp:2"});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    QVERIFY2(!c.err.contains("left out"), c.err.constData());
    auto info = stoker::inspectCheckpoint(dst.toStdString());
    QCOMPARE(info.nonTensorItems.size(), std::size_t{2});
    const QString check = QString(R"(
import io, sys; sys.path.insert(0, '%1')
from dcp_compat import alias_torch2_modules, dcp, md13, torch
alias_torch2_modules()
def items(d):
    r = dcp.FileSystemReader(d); m = r.read_metadata(); out = {}
    for k, v in m.state_dict_metadata.items():
        if isinstance(v, md13.BytesStorageMetadata):
            s = m.storage_data[md13.MetadataIndex(k)]
            out[k] = torch.load(io.BytesIO(open(d + '/' + s.relative_path, 'rb').read()[s.offset:s.offset + s.length]))
    return out
a, b = items(sys.argv[1]), items(sys.argv[2])
print(a); assert a == b == {'step': 42, 'config': {'lr': 0.001, 'name': 'run-7'}}, (a, b)
)").arg(STOKER_SOURCE_DIR "/tests/ckpt");
    auto r = stoker::test::runPython(check, {tmp("single"), dst});
    QVERIFY2(r.exitCode == 0, (r.out + r.err).constData());
    auto load = run(QStringLiteral(STOKER_PYTHON), {kTorchLoad, dst, tmp("single-reference.pt")});
    QVERIFY2(load.exitCode == 0, (load.out + load.err).constData());
  }

  // torch >= 2.3's .pt: UInt16/UInt32/Float8 storages read as bytes, records read in place.
  void readsTorch2PtFiles() {
    auto made = run(QStringLiteral(STOKER_PYTHON), {kPtTorch2, tmp("torch2.pt"), tmp("torch2-expected.safetensors")});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    auto info = stoker::inspectCheckpoint(tmp("torch2.pt").toStdString());
    QCOMPARE(info.find("u16")->dtype, stoker::Dtype::U16);
    QCOMPARE(info.find("u32")->dtype, stoker::Dtype::U32);
    QCOMPARE(info.find("f8")->dtype, stoker::Dtype::F8_E4M3);
    const auto& weight = info.find("weight")->pieces.at(0);  // a parameter with state
    QVERIFY2(!weight.loadFromPt, "an aligned record is read in place");
    QCOMPARE(weight.dataOffset % 64, std::uint64_t{0});
    auto v = runStoker({"ckpt", "verify", tmp("torch2.pt"), tmp("torch2-expected.safetensors")});
    QVERIFY2(v.exitCode == 0, (v.out + v.err).constData());
    auto c = runStoker({"ckpt", "convert", tmp("torch2.pt"), tmp("torch2-hf"), "--to", "hf"});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    auto v2 = runStoker({"ckpt", "verify", tmp("torch2-hf"), tmp("torch2-expected.safetensors")});
    QVERIFY2(v2.exitCode == 0, (v2.out + v2.err).constData());
  }

  // Hostile sizes found in review: a few bytes of pickle that copy one memoised dict into object
  // after object (gigabytes before STOP), and a .pt storage whose byte size wraps around 2^64.
  // Real torch 2.11 checkpoints (not re-pickled 1.13 ones): inspected with every tensor's name, dtype
  // and shape as torch wrote it, converted to every target and back to one safetensors file, each
  // tensor's bytes equal to the SHA-256 torch's process recorded. torch 2.11 loads these outputs
  // too (check_stoker_outputs.py, on the GPU machines).
  void convertsRealTorch2Checkpoints_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("target");
    for (const char* fixture : {"dcp", "dcp_fsdp", "model.pt", "model.safetensors"})
      for (const char* to : {"single", "ranks:2", "hf:64KB", "pt", "dcp:2"})
        QTest::newRow((QString(fixture) + " -> " + to).toUtf8()) << QString(fixture) << QString(to);
  }
  void convertsRealTorch2Checkpoints() {
    QFETCH(QString, fixture);
    QFETCH(QString, target);
    const QMap<QString, QString> expected = expectedDigests(fixture);
    QVERIFY2(expected.size() >= 18, qPrintable(kRealTorch2 + "/expected.json has no tensors for " + fixture));
    auto inspect = runStoker({"ckpt", "inspect", kRealTorch2 + "/" + fixture, "--json"});
    QVERIFY2(inspect.exitCode == 0, inspect.err.constData());
    QStringList named;
    for (const auto& v : QJsonDocument::fromJson(inspect.out).object()["tensors"].toArray())
      named << v.toObject()["name"].toString();
    named.sort();
    QCOMPARE(named, QStringList(expected.keys()));

    const QString tag = QString(fixture + "-" + target).replace(':', '_');
    const QString dst = tmp("real-" + tag);
    auto c = runStoker({"ckpt", "convert", kRealTorch2 + "/" + fixture, dst, "--to", target});
    QVERIFY2(c.exitCode == 0, c.err.constData());
    QVERIFY2(!QFileInfo::exists(dst + "/.stoker-journal"), "the journal goes when the conversion is complete");
    QString single = dst + "/model.safetensors";
    if (target != "single") {  // back to one file: the bytes every target carried
      auto back = runStoker({"ckpt", "convert", dst, tmp("back-" + tag), "--to", "single"});
      QVERIFY2(back.exitCode == 0, back.err.constData());
      single = tmp("back-" + tag) + "/model.safetensors";
    }
    const QMap<QString, QString> got = safetensorsDigests(single);
    for (auto it = expected.begin(); it != expected.end(); ++it)
      QVERIFY2(got.value(it.key()) == it.value(),
               qPrintable(it.key() + ": " + got.value(it.key(), "missing") + " for " + it.value()));
    QCOMPARE(got.size(), expected.size());
  }

  void refusesAmplifyingAndOverflowingInput() {
    using namespace std::string_literals;  // the pickle holds NUL bytes
    std::string p = "\x80\x02" "ctorch.distributed.checkpoint.metadata\nMetadata\nq\x00"s;
    p += "}q\x01("s;  // a dict of 20,000 entries, memoised
    for (int i = 0; i < 20000; ++i) p += "J"s + std::string(reinterpret_cast<const char*>(&i), 4) + "N"s;
    p += "u"s;
    for (int i = 0; i < 1000; ++i) p += "h\x00)\x81h\x01" "b"s;  // Metadata(); BUILD with that dict
    p += "."s;
    try {
      stoker::parseDcpMetadata(reinterpret_cast<const std::uint8_t*>(p.data()), p.size(), "amplify/.metadata");
      QFAIL("an amplifying .metadata was accepted");
    } catch (const stoker::Error& e) {
      QVERIFY2(QString(e.what()).contains("copies more than"), e.what());
    }
    auto made = run(QStringLiteral(STOKER_PYTHON), {STOKER_SOURCE_DIR "/tests/ckpt/pt_overflow_fixture.py", tmp("overflow.pt")});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    auto r = runStoker({"ckpt", "convert", tmp("overflow.pt"), tmp("overflow-out"), "--to", "single"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("overflows"), r.err.constData());
    // A 1 MiB key shared by 300 entries (a 1.3 KB file): 300 MiB of names, refused at 64 MiB.
    made = run(QStringLiteral(STOKER_PYTHON), {STOKER_SOURCE_DIR "/tests/ckpt/pt_overflow_fixture.py", tmp("names.pt"), "names"});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    r = runStoker({"ckpt", "inspect", tmp("names.pt")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("state dict names take more than 67108864 bytes"), r.err.constData());
    // A DCP path joined from a memoised 1000-byte part 1000 times, fed back in 1000 times: a GB
    // (and a TB one step further) from a few KB of .metadata; refused at 64 MiB of copied strings.
    {
      std::string q = "\x80\x02" "cpathlib\nPosixPath\nq\x00"s;
      q += "X"s + std::string("\xe8\x03\x00\x00", 4) + std::string(1000, 'p') + "q\x01"s;
      q += "h\x00("s;
      for (int i = 0; i < 1000; ++i) q += "h\x01"s;
      q += "tRq\x02h\x00("s;
      for (int i = 0; i < 1000; ++i) q += "h\x02"s;
      q += "tR."s;
      try {
        stoker::parseDcpMetadata(reinterpret_cast<const std::uint8_t*>(q.data()), q.size(), "paths/.metadata");
        QFAIL("a .metadata joining paths to a GB was accepted");
      } catch (const stoker::Error& e) {
        QVERIFY2(QString(e.what()).contains("copies more than 67108864 bytes of strings"), e.what());
      }
    }
    // A zero stride in bounds whose dense bytes wrapped: refused at reading, by verify and convert.
    made = run(QStringLiteral(STOKER_PYTHON), {STOKER_SOURCE_DIR "/tests/ckpt/pt_overflow_fixture.py", tmp("stride0.pt"), "stride0"});
    QVERIFY2(made.exitCode == 0, made.err.constData());
    for (const QStringList& args : {QStringList{"ckpt", "verify", tmp("stride0.pt"), tmp("stride0.pt")},
                                    QStringList{"ckpt", "convert", tmp("stride0.pt"), tmp("stride0-out"), "--to", "single"}}) {
      r = runStoker(args);
      QCOMPARE(r.exitCode, 2);
      QVERIFY2(r.err.contains("stride0.pt") && r.err.contains("576460752303423489 elements is too large to load"), r.err.constData());
    }
  }

  void refusesBadInput_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing .metadata") << "missing-metadata" << "holds .distcp files but no .metadata";
    QTest::newRow("truncated .metadata") << "truncated-metadata" << "truncated pickle";
    QTest::newRow("not a pickle") << "not-a-pickle" << "is not a pickle";
    QTest::newRow("class outside DCP's") << "evil-class" << "refuses posix.system";
    QTest::newRow("item past the file's end") << "item-past-end" << "runs past the end of __0_0.distcp";
    QTest::newRow("missing data file") << "missing-data-file" << "__9_9.distcp is missing";
    QTest::newRow("relative_path leaves the directory") << "path-escapes" << "leaves the checkpoint directory";
    QTest::newRow("chunks overlap") << "chunks-overlap" << "overlap";
    QTest::newRow("chunks leave a hole") << "chunks-leave-hole" << "holes in the tensor";
    QTest::newRow("chunk exceeds the tensor") << "chunk-exceeds-tensor" << "exceeds the tensor's size";
    QTest::newRow("item disagrees with its dtype") << "item-dtype-disagrees" << "holds F32 [1024, 256], the metadata says F64";
    QTest::newRow("item disagrees with its chunk's size") << "item-size-disagrees" << ", the metadata says";
    QTest::newRow("item zip corrupt") << "item-zip-corrupt" << "is a corrupt zip";
    QTest::newRow("zstd item that is not zstd") << "item-zstd-not-zstd" << "does not decompress: Unknown frame descriptor";
    QTest::newRow("zstd item cut short") << "item-zstd-truncated" << "ends in the middle of a zstd frame";
    QTest::newRow("zstd bomb") << "item-zstd-bomb" << "decompresses to more than";
    QTest::newRow("zstd bomb in a huge declared chunk") << "item-zstd-huge-bomb" << "decompresses to more than 1074790400 bytes";
    QTest::newRow("zstd item shared by two chunks") << "item-zstd-shared" << "is another chunk's too";
    QTest::newRow("zstd item shared by two non-tensor entries") << "bytes-zstd-shared" << "\"step.copy\": its compressed item";
    QTest::newRow("unknown transform") << "item-rot13" << "items with transform stream.rot13/1 are not supported";
    QTest::newRow("item serialised as safetensors") << "item-safetensors" << "SerializationFormat.SAFETENSORS";
  }
  void refusesBadInput() {
    QFETCH(QString, name);
    QFETCH(QString, message);
    const QString src = tmp("bad/" + name);
    auto i = runStoker({"ckpt", "inspect", src});
    QCOMPARE(i.exitCode, 2);
    const QString dst = tmp("bad-out-" + name);
    auto c = runStoker({"ckpt", "convert", src, dst, "--to", "single"});
    QCOMPARE(c.exitCode, 2);
    const QList<QByteArray> lines = c.err.trimmed().split('\n');
    QCOMPARE(lines.size(), 1);
    QVERIFY2(lines.front().startsWith("error: ") && lines.front().contains(message.toUtf8()), c.err.constData());
    QVERIFY2(!QFileInfo::exists(dst), "nothing is written for a bad source");
    QVERIFY2(!QFileInfo::exists(tmp("bad/PWNED")), "the unpickler ran code");
  }

  // A compressed item is read keeping only its zip's head and tail: inspecting a 1 GiB declared
  // chunk whose item decompresses past it stays far below 1 GiB of memory (peak RSS of the child,
  // measured by Python's getrusage; holding the item whole took more than 1 GiB).
  void aZstdBombIsRefusedInBoundedMemory() {
    const char* script =
        "import resource, subprocess, sys\n"
        "r = subprocess.run([sys.argv[1], 'ckpt', 'inspect', sys.argv[2]], capture_output=True, text=True)\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
        "print(r.stderr.strip())\n";
    auto r = stoker::test::runPythonArgs({"-c", script, QStringLiteral(STOKER_CLI_PATH), tmp("bad/item-zstd-huge-bomb")});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QList<QByteArray> lines = r.out.trimmed().split('\n');
    QVERIFY2(lines.size() == 2, r.out.constData());
    const QList<QByteArray> figures = lines[0].split(' ');
    QCOMPARE(figures[0].toInt(), 2);
    QVERIFY2(lines[1].contains("decompresses to more than"), lines[1].constData());
    qInfo("peak RSS inspecting the 1 GiB zstd bomb: %d MiB", figures[1].toInt());
    QVERIFY2(figures[1].toInt() < 512, lines[0].constData());
  }
};

QTEST_GUILESS_MAIN(TestCkptDcp)
#include "tst_ckpt_dcp.moc"
