// The reshard engine in-process: N -> M grids (1 -> k, k -> 1, uneven, every
// split dim), HF packing, single and .pt both ways, dtype conversion equal to
// libtorch's, F16 overflow reporting, verify, metadata consistency problems,
// destination rules, cancel + resume, a crashed write + resume, async saves.
#include <QtTest>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#include <csignal>

#include "io/host_tensor_torch.h"
#include "ckpt/async_saver.h"
#include "ckpt/convert.h"
#include "ckpt/convert_journal.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "ckpt/verify.h"
#include "ckpt_fixtures.h"
#include "io/host_tensor.h"
#include "io/safetensors_file.h"
#include "io/safetensors_writer.h"
#include "util/atomic_file.h"
#include "util/job_threads.h"
#include "util/lru_folder.h"
#include "util/mapped_file.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/remove_tree.h"

using namespace stoker;
using stoker::test::TensorMap;
namespace fs = std::filesystem;

namespace {

ConvertReport convert(const std::string& src, const std::string& dst, const std::string& to,
                      const std::string& dtype = "keep", ConvertOptions o = {}) {
  CheckpointInfo info = inspectCheckpoint(src);
  requireConsistent(info);
  ReshardPlan plan = planReshard(info, parseTargetSpec(to, dtype));
  return convertCheckpoint(info, plan, dst, o);
}

std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Expects Error(BadInput) whose message contains `expected`.
template <typename F>
void expectBadInput(F&& f, const QString& expected) {
  try {
    f();
    QFAIL(qPrintable("no error; expected: " + expected));
  } catch (const Error& e) {
    QVERIFY2(e.kind() == ErrorKind::BadInput, e.what());
    QVERIFY2(QString::fromStdString(e.what()).contains(expected), e.what());
  }
}

class CancelAfter : public ProgressSink {
 public:
  explicit CancelAfter(CancelToken& t, std::uint64_t bytes) : token_(t), bytes_(bytes) {}
  void progress(const ProgressUpdate& u) override {
    QVERIFY(u.done >= last_);
    QVERIFY(u.done <= u.total);
    last_ = u.done;
    if (u.done >= bytes_) token_.cancel();
  }
  std::uint64_t last_ = 0;

 private:
  CancelToken& token_;
  std::uint64_t bytes_;
};

}  // namespace

class TestCkptReshard : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  std::string path(const std::string& name) const { return tmp_.filePath(QString::fromStdString(name)).toStdString(); }

 private Q_SLOTS:
  void reshardGrid_data() {
    QTest::addColumn<int>("from");
    QTest::addColumn<int>("to");
    for (auto [n, m] : std::vector<std::pair<int, int>>{{1, 3}, {3, 1}, {8, 3}, {3, 8}, {4, 4}, {5, 7}, {2, 1}, {1, 1}})
      QTest::addRow("%d->%d", n, m) << n << m;
  }
  void reshardGrid() {
    QFETCH(int, from);
    QFETCH(int, to);
    TensorMap model = test::sampleModel(from * 10 + to);
    // Split dims other than 0, and replicated tensors, on the way in.
    std::map<std::string, test::RankSplit> splits{{"layer.0.attn.qkv", {1, {}}}, {"layer.0.mlp.up", {2, {}}},
                                                   {"layer.0.norm", {std::nullopt, {}}}};
    const std::string src = path("grid_src_" + std::to_string(from) + "_" + std::to_string(to));
    const std::string dst = src + "_out";
    test::writeRanks(src, model, from, splits);
    ConvertReport r = convert(src, dst, "ranks:" + std::to_string(to));
    QVERIFY(r.complete && r.indexWritten);
    QCOMPARE(static_cast<int>(r.written.size()), to);
    QCOMPARE(test::differences(model, test::readFull(dst)), std::string());
    // Every output rank holds the seed's even split of the kept dimension.
    CheckpointInfo out = inspectCheckpoint(dst);
    QVERIFY(out.problems.empty());
    QCOMPARE(*out.worldSize, to);
    const LogicalTensor* qkv = out.find("layer.0.attn.qkv");
    QCOMPARE(*qkv->shardDim, 1);
    QCOMPARE(qkv->shardSizes, evenSplit(10, to));
    QVERIFY(!out.find("layer.0.norm")->shardDim);
    QVERIFY(!out.find("step")->shardDim);  // a scalar stays whole
    QVERIFY(!fs::exists(ConvertJournal::directory(dst)));
  }

  void unevenSourceSizes() {
    TensorMap model = test::sampleModel(3);
    std::map<std::string, test::RankSplit> splits{{"embed.weight", {0, {30, 0, 7}}}, {"layer.0.attn.qkv", {1, {1, 9, 0}}}};
    test::writeRanks(path("uneven"), model, 3, splits);
    QVERIFY(convert(path("uneven"), path("uneven_2"), "ranks:2").complete);
    QCOMPARE(test::differences(model, test::readFull(path("uneven_2"))), std::string());
  }

  void metadataJsonIsTheSeedsBytes() {
    TensorMap m;
    m["b"] = at::zeros({5, 2});
    m["a"] = at::zeros({3});
    m["s"] = at::scalar_tensor(1.0);
    test::writeSingle(path("meta_src"), m);
    QVERIFY(convert(path("meta_src"), path("meta_out"), "ranks:2").complete);
    // serde_json::to_string_pretty of ShardMetadata (2-space indent, one array
    // element per line, no trailing newline); a scalar is replicated (null).
    const std::string expected =
        "{\n  \"num_ranks\": 2,\n  \"tensor_specs\": {\n    \"a\": {\n      \"full_shape\": [\n        3\n      ],\n"
        "      \"shard_dim\": 0,\n      \"shard_sizes\": [\n        2,\n        1\n      ]\n    },\n    \"b\": {\n"
        "      \"full_shape\": [\n        5,\n        2\n      ],\n      \"shard_dim\": 0,\n      \"shard_sizes\": [\n"
        "        3,\n        2\n      ]\n    },\n    \"s\": {\n      \"full_shape\": [],\n      \"shard_dim\": null,\n"
        "      \"shard_sizes\": []\n    }\n  }\n}";
    QCOMPARE(readText(path("meta_out/metadata.json")), expected);
  }

  void hfPackingGreedyInNameOrder() {
    TensorMap m;
    m["a"] = at::zeros({100});   // 400 B
    m["b"] = at::zeros({100});   // 400 B -> a+b = 800 fits 1000
    m["c"] = at::zeros({100});   // would make 1200: new shard
    m["d"] = at::zeros({1000});  // 4000 B, bigger than the limit: alone
    m["e"] = at::ones({10});
    test::writeSingle(path("hf_src"), m);
    QVERIFY(convert(path("hf_src"), path("hf_out"), "hf:1000B").complete);
    QCOMPARE(listDir(path("hf_out")),
             (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                       "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                       "model.safetensors.index.json"}));
    const std::string index = readText(path("hf_out/model.safetensors.index.json"));
    QVERIFY2(index.find("\"total_size\": 5240") != std::string::npos, index.c_str());
    QVERIFY(index.find("\"c\": \"model-00002-of-00004.safetensors\"") != std::string::npos);
    QVERIFY(index.find("\"d\": \"model-00003-of-00004.safetensors\"") != std::string::npos);
    QVERIFY(index.back() == '\n');
    QCOMPARE(test::differences(m, test::readFull(path("hf_out"))), std::string());
    // HF in, ranks out, and back.
    QVERIFY(convert(path("hf_out"), path("hf_ranks"), "ranks:3").complete);
    QCOMPARE(test::differences(m, test::readFull(path("hf_ranks"))), std::string());
    // One shard is just model.safetensors, no index.
    QVERIFY(convert(path("hf_src"), path("hf_one"), "hf").complete);
    QCOMPARE(listDir(path("hf_one")), std::vector<std::string>{"model.safetensors"});
  }

  void ptBothWays() {
    TensorMap model = test::sampleModel(7);
    model.erase("codes");  // keep to torch.save-able dtypes (all are, but U8 is covered elsewhere)
    test::writeRanks(path("pt_src"), model, 3);
    QVERIFY(convert(path("pt_src"), path("pt_out"), "pt").complete);
    QVERIFY(fs::exists(path("pt_out/model.pt")));
    QCOMPARE(test::differences(model, test::readFull(path("pt_out/model.pt"))), std::string());
    QVERIFY(convert(path("pt_out/model.pt"), path("pt_back"), "ranks:2").complete);
    QCOMPARE(test::differences(model, test::readFull(path("pt_back"))), std::string());
  }

  void dtypeConversionMatchesTorch() {
    at::manual_seed(11);
    TensorMap m;
    m["w32"] = at::randn({64, 33}) * 1000;
    m["w64"] = at::randn({17}, at::kDouble);
    m["w16"] = at::randn({9}).to(at::kHalf);
    m["ids"] = at::arange(10, at::kLong);  // not floating: kept
    test::writeRanks(path("dt_src"), m, 3);
    for (const char* dtype : {"bf16", "f16", "f32"}) {
      const std::string dst = path(std::string("dt_") + dtype);
      QVERIFY(convert(path("dt_src"), dst, "ranks:2", dtype).complete);
      const at::ScalarType want = std::string(dtype) == "bf16" ? at::kBFloat16
                                  : std::string(dtype) == "f16" ? at::kHalf : at::kFloat;
      TensorMap expected;
      for (const auto& [k, v] : m) expected[k] = k == "ids" ? v : v.to(want);
      QCOMPARE(test::differences(expected, test::readFull(dst)), std::string());
    }
  }

  void f16OverflowIsReported() {
    TensorMap m;
    m["big"] = at::tensor({1.0f, 65504.0f, 65519.0f, -70000.0f, 1e6f, INFINITY, NAN});
    m["fine"] = at::tensor({1.0f, -65504.0f});
    test::writeSingle(path("ovf_src"), m);
    ConvertReport r = convert(path("ovf_src"), path("ovf_out"), "single", "f16");
    QCOMPARE(r.f16Overflows.size(), std::size_t{1});
    QCOMPARE(r.f16Overflows[0].first, std::string("big"));
    QCOMPARE(r.f16Overflows[0].second.count, std::uint64_t{3});  // 65519, -70000, 1e6; inf and NaN were never finite
    QCOMPARE(r.f16Overflows[0].second.maxAbs, 1e6);
  }

  // Cancelled after the file holding the overflow was written: the --resume that finishes the
  // conversion still reports it (the journal kept it), so a resumed conversion cannot exit 0 on
  // values that became +-inf.
  void f16OverflowSurvivesAResume() {
    TensorMap m;
    m["big"] = at::zeros({2048, 1024});
    m["big"][0][0] = 70000.0f;  // in rank_0 of ranks:2 (rows 0-1023)
    m["other"] = at::ones({2048, 1024});
    test::writeSingle(path("ovr_src"), m);
    CancelToken token;
    CancelAfter sink(token, 6 << 20);  // in the second output file (4 MiB each in f16)
    ConvertOptions o;
    o.jobs = 1;
    o.memoryBudget = 16 << 20;  // buffers of 2 MiB: the cancel lands within the file
    o.progress = &sink;
    o.progressIntervalMs = 0;
    o.cancel = &token;
    try {
      convert(path("ovr_src"), path("ovr_out"), "ranks:2", "f16", o);
      QFAIL("not cancelled");
    } catch (const Error& e) {
      QVERIFY2(e.kind() == ErrorKind::Cancelled, e.what());
    }
    ConvertOptions resume;
    resume.resume = true;
    const ConvertReport r = convert(path("ovr_src"), path("ovr_out"), "ranks:2", "f16", resume);
    QVERIFY(r.complete);
    QCOMPARE(r.alreadyDone, std::vector<std::string>{"rank_0.safetensors"});
    QCOMPARE(r.f16Overflows.size(), std::size_t{1});
    QCOMPARE(r.f16Overflows[0].first, std::string("big"));
    QCOMPARE(r.f16Overflows[0].second.count, std::uint64_t{1});
    QCOMPARE(r.f16Overflows[0].second.maxAbs, 70000.0);
  }

  void verifyAcrossLayouts() {
    TensorMap model = test::sampleModel(5);
    test::writeRanks(path("v_a"), model, 4);
    test::writeSingle(path("v_b"), model);
    CheckpointInfo a = inspectCheckpoint(path("v_a")), b = inspectCheckpoint(path("v_b"));
    VerifyResult same = verifyCheckpoints(a, b, {});
    QVERIFY(same.equal);
    QCOMPARE(same.tensorsCompared, model.size());
    // Digests do not depend on the layout.
    auto da = digestCheckpoint(a, {}), db = digestCheckpoint(b, {});
    for (std::size_t i = 0; i < da.size(); ++i) QCOMPARE(da[i].hash, db[i].hash);

    TensorMap changed = model;
    changed["layer.0.mlp.up"] = model["layer.0.mlp.up"].clone();
    changed["layer.0.mlp.up"].view({-1})[17] += 1;
    test::writeSingle(path("v_c"), changed);
    VerifyResult diff = verifyCheckpoints(a, inspectCheckpoint(path("v_c")), {});
    QVERIFY(!diff.equal);
    QCOMPARE(diff.tensor, std::string("layer.0.mlp.up"));
    QCOMPARE(diff.reason, std::string("values differ"));

    TensorMap renamed = model;
    renamed["extra"] = at::zeros({1});
    test::writeSingle(path("v_d"), renamed);
    VerifyResult extra = verifyCheckpoints(a, inspectCheckpoint(path("v_d")), {});
    QCOMPARE(extra.tensor, std::string("extra"));
    QVERIFY(extra.reason.find("only in") != std::string::npos);
  }

  // A replicated tensor of a ranks checkpoint is held whole by every rank, and each rank loads its
  // own copy: verify compares every copy, not only rank 0's (a corrupt copy on rank 2 passed).
  void verifyComparesEveryCopyOfAReplicatedTensor() {
    TensorMap model = test::sampleModel(6);
    model["norm"] = at::arange(8, at::kFloat);
    const std::map<std::string, test::RankSplit> replicated{{"norm", {std::nullopt, {}}}};
    test::writeRanks(path("rep_a"), model, 4, replicated);
    TensorMap other = model;
    other["norm"] = model["norm"].clone();
    other["norm"][5] = 99.0f;
    test::writeRanks(path("rep_b"), other, 4, replicated);
    fs::copy_file(path("rep_b/rank_2.safetensors"), path("rep_a/rank_2.safetensors"), fs::copy_options::overwrite_existing);
    test::writeSingle(path("rep_single"), model);
    const VerifyResult r = verifyCheckpoints(inspectCheckpoint(path("rep_a")), inspectCheckpoint(path("rep_single")), {});
    QVERIFY(!r.equal);
    QCOMPARE(r.tensor, std::string("norm"));
    QVERIFY2(r.reason.find("rank_2.safetensors differs from the one in") != std::string::npos &&
                 r.reason.find("rank_0.safetensors") != std::string::npos,
             r.reason.c_str());
    // Every copy alike: equal, as before.
    QVERIFY(verifyCheckpoints(inspectCheckpoint(path("rep_b")), inspectCheckpoint(path("rep_b")), {}).equal);
  }

  void ranksMetadataContradictions_data() {
    QTest::addColumn<QString>("breakage");
    QTest::addColumn<QString>("expected");
    QTest::newRow("sum of shard_sizes") << "sum" << "shard_sizes sum to 5 but full_shape[0] is 6";
    QTest::newRow("non-shard dim differs") << "dim" << "has shape [3, 3], expected [3, 2]";
    QTest::newRow("rank file missing") << "missing" << "rank_1.safetensors is missing";
    QTest::newRow("extra rank file") << "extra" << "rank_2.safetensors is extra";
    QTest::newRow("tensor missing on a rank") << "tensor" << "tensor \"b\" is missing on rank 1";
    QTest::newRow("dtypes differ") << "dtype" << "is F32 on rank 0 but F64 on rank 1";
    QTest::newRow("tensor not in metadata") << "unlisted" << "holds tensor \"c\", which metadata.json does not list";
  }
  void ranksMetadataContradictions() {
    QFETCH(QString, breakage);
    QFETCH(QString, expected);
    const std::string dir = path("bad_ranks_" + breakage.toStdString());
    TensorMap m{{"a", at::ones({6, 2})}, {"b", at::ones({4})}};
    test::writeRanks(dir, m, 2);
    auto rewrite = [&](int rank, TensorMap tensors) {
      std::vector<std::pair<std::string, HostTensor>> list;
      for (auto& [k, v] : tensors) list.emplace_back(k, hostTensorFromTorch(v.contiguous()));
      writeSafetensors(dir + "/rank_" + std::to_string(rank) + ".safetensors", list);
    };
    if (breakage == "sum") {
      std::string meta = readText(dir + "/metadata.json");
      meta.replace(meta.find("        3,\n        3\n"), 20, "        3,\n        2\n");
      std::ofstream(dir + "/metadata.json") << meta;
    } else if (breakage == "dim") {
      rewrite(1, {{"a", at::ones({3, 3})}, {"b", at::ones({2})}});
    } else if (breakage == "missing") {
      fs::remove(dir + "/rank_1.safetensors");
    } else if (breakage == "extra") {
      fs::copy_file(dir + "/rank_1.safetensors", dir + "/rank_2.safetensors");
    } else if (breakage == "tensor") {
      rewrite(1, {{"a", at::ones({3, 2})}});
    } else if (breakage == "dtype") {
      rewrite(1, {{"a", at::ones({3, 2}, at::kDouble)}, {"b", at::ones({2})}});
    } else if (breakage == "unlisted") {
      rewrite(1, {{"a", at::ones({3, 2})}, {"b", at::ones({2})}, {"c", at::ones({1})}});
    }
    CheckpointInfo info = inspectCheckpoint(dir);
    QVERIFY(!info.problems.empty());
    expectBadInput([&] { requireConsistent(info); }, expected);
    // Nothing is written for a contradictory source.
    expectBadInput([&] { convert(dir, dir + "_out", "ranks:3"); }, expected);
    QVERIFY(!fs::exists(dir + "_out"));
  }

  void hfIndexContradictions_data() {
    QTest::addColumn<QString>("index");
    QTest::addColumn<QString>("expected");
    const QString a = "model-00001-of-00002.safetensors", b = "model-00002-of-00002.safetensors";
    auto doc = [](const QString& total, const QString& map) {
      return "{\"metadata\": {\"total_size\": " + total + "}, \"weight_map\": {" + map + "}}";
    };
    QTest::newRow("names a missing file") << doc("48", "\"x\": \"" + a + "\", \"y\": \"model-9.safetensors\"")
                                          << "model-9.safetensors is named by the index but missing";
    QTest::newRow("tensor the file lacks") << doc("48", "\"x\": \"" + a + "\", \"y\": \"" + a + "\"")
                                           << "the index says " + a + ", which does not contain it";
    QTest::newRow("tensor in two files") << doc("48", "\"x\": \"" + a + "\", \"y\": \"" + b + "\", \"x\": \"" + b + "\"")
                                         << "listed twice";
    QTest::newRow("wrong total_size") << doc("47", "\"x\": \"" + a + "\", \"y\": \"" + b + "\"")
                                      << "metadata.total_size is 47 but the tensors hold 48 bytes";
    QTest::newRow("path leaves the directory") << doc("48", "\"x\": \"../" + a + "\", \"y\": \"" + b + "\"")
                                               << "outside the checkpoint directory";
    QTest::newRow("absolute path") << doc("48", "\"x\": \"/etc/passwd\", \"y\": \"" + b + "\"")
                                   << "outside the checkpoint directory";
    // Found by fuzz_hf_index: std::filesystem::exists threw filesystem_error (not a BadInput)
    // for a name the OS refuses outright.
    QTest::newRow("name too long") << doc("48", "\"x\": \"" + QString(300, 'F') + ".safetensors\", \"y\": \"" + b + "\"")
                                   << ".safetensors: cannot be looked up: File name too long";
  }
  void hfIndexContradictions() {
    QFETCH(QString, index);
    QFETCH(QString, expected);
    static int n = 0;
    const std::string dir = path("bad_hf_" + std::to_string(n++));
    TensorMap m{{"x", at::ones({4})}, {"y", at::ones({8})}};
    test::writeSingle(path("hf_good_src"), m);
    convert(path("hf_good_src"), dir, "hf:20B");
    std::ofstream(dir + "/model.safetensors.index.json") << index.toStdString();
    expectBadInput(
        [&] {
          CheckpointInfo info = inspectCheckpoint(dir);
          requireConsistent(info);
        },
        expected);
  }

  void hfTensorInTwoFiles() {
    // Both shards really hold "x"; the index names one of them.
    const std::string dir = path("hf_two");
    TensorMap m{{"x", at::ones({4})}, {"y", at::ones({8})}};
    test::writeSingle(path("hf_two_src"), m);
    convert(path("hf_two_src"), dir, "hf:20B");
    std::vector<std::pair<std::string, HostTensor>> both{{"x", hostTensorFromTorch(at::ones({4}))},
                                                          {"y", hostTensorFromTorch(at::ones({8}))}};
    writeSafetensors(dir + "/model-00002-of-00002.safetensors", both);
    CheckpointInfo info = inspectCheckpoint(dir);
    expectBadInput([&] { requireConsistent(info); }, "tensor \"x\" appears in both model-00001-of-00002.safetensors "
                                                     "and model-00002-of-00002.safetensors");
  }

  void destinationRules() {
    TensorMap m{{"w", at::ones({6, 2})}};
    test::writeRanks(path("dst_src"), m, 2);
    expectBadInput([&] { convert(path("dst_src"), path("dst_src/inner"), "single"); }, "is inside the source checkpoint");
    QVERIFY(!fs::exists(path("dst_src/inner")));
    expectBadInput([&] { convert(path("dst_src"), path("dst_src"), "single"); }, "contains the source file");
    fs::create_directories(path("dst_busy"));
    std::ofstream(path("dst_busy/notes.txt")) << "mine";
    expectBadInput([&] { convert(path("dst_src"), path("dst_busy"), "single"); }, "already exists; pass --force");
    QCOMPARE(listDir(path("dst_busy")), std::vector<std::string>{"notes.txt"});
    // --force replaces checkpoint files but leaves the user's other files.
    std::ofstream(path("dst_busy/rank_7.safetensors")) << "stale";
    ConvertOptions force;
    force.force = true;
    QVERIFY(convert(path("dst_src"), path("dst_busy"), "single", "keep", force).complete);
    QCOMPARE(listDir(path("dst_busy")), (std::vector<std::string>{"model.safetensors", "notes.txt"}));
    // An empty directory is fine; a file is not.
    fs::create_directories(path("dst_empty"));
    QVERIFY(convert(path("dst_src"), path("dst_empty"), "single").complete);
    std::ofstream(path("dst_file")) << "x";
    expectBadInput([&] { convert(path("dst_src"), path("dst_file"), "single"); }, "is not a directory");
    ConvertOptions resume;
    resume.resume = true;
    expectBadInput([&] { convert(path("dst_src"), path("dst_none"), "single", "keep", resume); }, "no conversion to resume");
    // Killed between creating DST and writing its journal (found by tests/soak/convert_faults.py):
    // nothing was converted, so --resume starts the conversion.
    fs::create_directories(path("dst_unjournaled/.stoker-journal"));
    std::ofstream(path("dst_unjournaled/.stoker-journal/.plan.stoker-tmp-1-0")) << "torn";
    QVERIFY(convert(path("dst_src"), path("dst_unjournaled"), "single", "keep", resume).complete);
    QCOMPARE(listDir(path("dst_unjournaled")), std::vector<std::string>{"model.safetensors"});
    // Killed after finishing (journal removed, process not yet gone): --resume has nothing to do.
    const auto again = convert(path("dst_src"), path("dst_unjournaled"), "single", "keep", resume);
    QVERIFY(again.complete && again.written.empty());
    QCOMPARE(again.alreadyDone, std::vector<std::string>{"model.safetensors"});
    // Not the planned bytes and no journal: nothing to resume, and the message says why.
    fs::resize_file(path("dst_unjournaled/model.safetensors"), 8);
    expectBadInput([&] { convert(path("dst_src"), path("dst_unjournaled"), "single", "keep", resume); },
                   "a finished conversion removes its journal");
  }

  // A later checkpoint of the same model has the same layout and sizes: its --resume into a DST
  // that holds the finished conversion of an earlier one is refused by the fingerprint DST keeps,
  // not reported as done. That needs a file system with user xattrs (ext4, xfs, btrfs; tmpfs on
  // Linux >= 6.6); elsewhere --resume can check only the layout and sizes.
  // removeTree stands in for std::filesystem::remove_all (PyTorch's wheels export a copy of it
  // that crashed stoker-torch): a tree goes, a symlink goes without what it points to, a missing
  // path is no error, and what cannot be removed is reported.
  void removeTreeRemovesWhatRemoveAllDid() {
    fs::create_directories(path("tree/a/b"));
    std::ofstream(path("tree/a/b/f")) << "x";
    std::ofstream(path("tree/g")) << "y";
    fs::create_directories(path("kept"));
    std::ofstream(path("kept/h")) << "z";
    fs::create_directory_symlink(path("kept"), path("tree/link"));
    std::error_code ec;
    removeTree(path("tree"), ec);
    QVERIFY2(!ec, ec.message().c_str());
    QVERIFY(!fs::exists(path("tree")));
    QCOMPARE(listDir(path("kept")), std::vector<std::string>{"h"});  // the link was not followed
    removeTree(path("tree"), ec);
    QVERIFY(!ec);
    std::ofstream(path("lone")) << "w";
    removeTree(path("lone"), ec);
    QVERIFY(!ec && !fs::exists(path("lone")));
    removeTree(path(std::string(300, 'n')), ec);  // a name longer than NAME_MAX: said, not ignored
    QCOMPARE(ec, std::make_error_code(std::errc::filename_too_long));
  }

  // A file filled in place (the part cache's fetch): the bytes written through the mapping are the
  // file's once committed, readable after; without a commit nothing is left; nothing else may be
  // written into it.
  void atomicFileFilledInPlace() {
    fs::create_directories(path("atomic"));
    {
      AtomicFile file(path("atomic/mapped.part"));
      std::uint8_t* bytes = file.mapForWrite(100000);
      QVERIFY(bytes);
      for (int i = 0; i < 100000; ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
      try {
        file.write("x", 1);
        QFAIL("a write into a mapped file was taken");
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::Internal);
      }
      file.commit(false);
      QCOMPARE(int(bytes[99999]), (99999 * 7) & 0xff);  // still mapped after the commit
    }
    std::ifstream in(path("atomic/mapped.part"), std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    QCOMPARE(got.size(), std::size_t(100000));
    QCOMPARE(int(static_cast<std::uint8_t>(got[12345])), (12345 * 7) & 0xff);
    {
      AtomicFile dropped(path("atomic/dropped.part"));
      std::memset(dropped.mapForWrite(4096), 1, 4096);
    }
    QCOMPARE(listDir(path("atomic")), std::vector<std::string>{"mapped.part"});  // no temporary file either
    AtomicFile empty(path("atomic/empty.part"));
    QVERIFY(empty.mapForWrite(0) == nullptr);
    empty.commit(false);
    QCOMPARE(fs::file_size(path("atomic/empty.part")), std::uintmax_t(0));
  }

  // The host as this process's AtomicFile temporaries name it (after their last '.').
  std::string tempHost() {
    fs::create_directories(path("probe"));
    AtomicFile probe(path("probe/p"));
    return probe.tempPath().substr(probe.tempPath().rfind('.') + 1);
  }

  // On a file system that several nodes share: a temporary's name holds its host, a name taken
  // already (another node's process of the same pid) is never truncated but passed over, and only
  // this host's dead writers' temporaries count as orphaned.
  void atomicTemporariesNameTheirHost() {
    fs::create_directories(path("shared"));
    const std::string h = tempHost();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    QVERIFY2(!h.empty() && h.size() <= 64 && (h == host || std::string(host).size() > 64 || std::string(host).find('.') != std::string::npos),
             h.c_str());
    std::string firstTemp;
    {
      AtomicFile probe(path("shared/w.part"));
      firstTemp = probe.tempPath();
    }
    QVERIFY2(firstTemp.size() > h.size() && firstTemp.compare(firstTemp.size() - h.size() - 1, std::string::npos, "." + h) == 0,
             firstTemp.c_str());
    // The next names this process would pick, held by "another writer" with bytes in them.
    const std::string stem = firstTemp.substr(0, firstTemp.rfind('-') + 1);
    const long next = std::stol(firstTemp.substr(stem.size()));
    for (long n = next + 1; n <= next + 3; ++n) std::ofstream(stem + std::to_string(n) + "." + h) << "theirs";
    {
      AtomicFile mine(path("shared/w.part"));
      QCOMPARE(mine.tempPath(), stem + std::to_string(next + 4) + "." + h);
      mine.write("mine", 4);
      mine.commit(false);
    }
    std::ifstream theirs(stem + std::to_string(next + 2) + "." + h);
    std::string kept;
    theirs >> kept;
    QCOMPARE(kept, std::string("theirs"));
    // A dead pid on this host is orphaned; the same pid on another host, or a live one, is not.
    const std::string dead = ".x.stoker-tmp-" + std::to_string(INT32_MAX - 7) + "-0.";
    QVERIFY(isOrphanedTemporary(dead + h));
    QVERIFY(!isOrphanedTemporary(dead + "other-node"));
    QVERIFY(!isOrphanedTemporary(".x.stoker-tmp-" + std::to_string(::getpid()) + "-0." + h));
    QVERIFY(!isOrphanedTemporary("x.safetensors"));
    // A cache folder's scan removes only temporaries whose writer is gone: this host's dead
    // process's after 10 minutes, another host's after a day; a live writer's never, however old
    // (by age alone, a part fetched for over 10 minutes lost its file under its writer).
    const std::string cache = path("lru");
    std::filesystem::create_directories(cache);
    bool agedAll = true;
    const auto aged = [&](const std::string& name, int hours) {
      const std::string file = cache + "/" + name;
      std::ofstream(file) << "part";
      const timespec times[2] = {{::time(nullptr) - hours * 3600, 0}, {::time(nullptr) - hours * 3600, 0}};
      agedAll &= ::utimensat(AT_FDCWD, file.c_str(), times, 0) == 0;
      return file;
    };
    const std::string live = aged(".p.part.stoker-tmp-" + std::to_string(::getpid()) + "-9." + h, 3);
    // A writer in another PID namespace (a container sharing the folder): its pid looks dead from
    // here, but it holds its temporary's lock, as every AtomicFile does while it lives.
    const std::string namespaced = aged(".z.stoker-tmp-" + std::to_string(INT32_MAX - 7) + "-2." + h, 1);
    const int held = ::open(namespaced.c_str(), O_RDONLY | O_CLOEXEC);
    QVERIFY(held >= 0 && ::flock(held, LOCK_EX | LOCK_NB) == 0);
    QVERIFY(!isOrphanedTemporary(namespaced));
    {
      AtomicFile writing(cache + "/w.part");  // a live AtomicFile's temporary is locked
      QVERIFY(isTemporaryLocked(writing.tempPath()));
    }
    const std::string gone = aged(dead + h, 1), justGone = aged(".y.stoker-tmp-" + std::to_string(INT32_MAX - 7) + "-1." + h, 0);
    const std::string farOld = aged(dead + "other-node", 30), farNew = aged(dead + "other-node2", 1);
    QVERIFY(agedAll);
    LruFolder::read(cache, {".part"});
    QVERIFY(std::filesystem::exists(live));
    QVERIFY(std::filesystem::exists(namespaced));  // locked: its writer lives
    ::close(held);
    QVERIFY(isOrphanedTemporary(namespaced));
    QVERIFY(!std::filesystem::exists(gone));
    QVERIFY(std::filesystem::exists(justGone));  // its pid may be another PID namespace's writer
    QVERIFY(!std::filesystem::exists(farOld));
    QVERIFY(std::filesystem::exists(farNew));
  }

  // A file larger than RAM + swap maps (MAP_NORESERVE): a private writable mapping was charged in
  // full against the commit limit, and a 30 GB shard on a 23 GiB machine failed to open.
  void hugeFilesMap() {
    const std::string file = path("sparse.bin");
    {
      std::ofstream(file) << "x";
    }
    std::error_code ec;
    std::filesystem::resize_file(file, std::uintmax_t{1} << 40, ec);  // 1 TiB, sparse
    if (ec) QSKIP("this file system has no sparse files");
    const auto map = MappedFile::open(file);
    QCOMPARE(map->size(), std::size_t{1} << 40);
    QCOMPARE(map->data()[0], std::uint8_t('x'));
    QCOMPARE(map->data()[(std::size_t{1} << 40) - 1], std::uint8_t(0));
    std::filesystem::remove(file);
  }

  // forEachFetchedInOrder in a forked child: the thread's kept helpers stayed in the parent, and
  // the child's call waited for ever for fetches nobody ran.
  void keptThreadsWorkInAForkedChild() {
    forEachFetchedInOrder(8, 3, [](std::int64_t) {}, [](std::int64_t) {});  // this thread's helpers exist
    const pid_t child = ::fork();
    if (child == 0) {
      std::atomic<int> fetched{0};
      forEachFetchedInOrder(8, 3, [&](std::int64_t) { ++fetched; }, [](std::int64_t) {});
      ::_exit(fetched == 8 ? 0 : 1);
    }
    QVERIFY(child > 0);
    int status = 0;
    for (int i = 0; i < 200 && ::waitpid(child, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(child, &status, WNOHANG) == 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      QFAIL("the forked child's fetches never ran");
    }
    QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  // forEachFetchedInOrder's helpers are kept: every item fetched once, on several threads, the
  // same helpers call after call; a call from inside a use (same thread) still works.
  void keptThreadsShareTheItems() {
    std::mutex mutex;
    std::set<std::thread::id> firstIds, laterIds;
    auto run = [&](std::set<std::thread::id>& ids) {
      std::vector<std::atomic<int>> seen(24);
      forEachFetchedInOrder(
          24, 4,
          [&](std::int64_t i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));  // long enough for every helper to take items
            ++seen[static_cast<std::size_t>(i)];
            std::lock_guard<std::mutex> lock(mutex);
            ids.insert(std::this_thread::get_id());
          },
          [](std::int64_t) {});
      for (const auto& n : seen) QCOMPARE(n.load(), 1);
    };
    run(firstIds);
    QVERIFY2(firstIds.size() >= 2 && firstIds.size() <= 4, qPrintable(QString::number(firstIds.size())));
    QVERIFY(!firstIds.count(std::this_thread::get_id()));  // the caller uses, the helpers fetch
    run(laterIds);
    for (const auto& id : laterIds) QVERIFY(firstIds.count(id));  // no new threads
    std::atomic<int> inner{0};
    forEachFetchedInOrder(
        3, 3, [](std::int64_t) {},
        [&](std::int64_t) { forEachFetchedInOrder(5, 2, [&](std::int64_t) { ++inner; }, [](std::int64_t) {}); });
    QCOMPARE(inner.load(), 15);
  }

  // forEachFetchedInOrder: each item used once, in order, as soon as its own fetch is in (the
  // first is used while later fetches still run); an error from use stops the fetches not yet
  // taken and comes back after the running ones end; nested, it still fetches then uses.
  void fetchedItemsAreUsedInOrderAsTheyArrive() {
    constexpr int kItems = 24;
    std::vector<std::atomic<int>> fetched(kItems);
    std::vector<std::int64_t> used;
    std::atomic<int> fetchesEnded{0};
    int endedWhenFirstUsed = -1;
    forEachFetchedInOrder(
        kItems, 4,
        [&](std::int64_t i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 1 : 50));
          ++fetched[static_cast<std::size_t>(i)];
          ++fetchesEnded;
        },
        [&](std::int64_t i) {
          QCOMPARE(fetched[static_cast<std::size_t>(i)].load(), 1);  // never before its fetch
          if (i == 0) endedWhenFirstUsed = fetchesEnded.load();
          used.push_back(i);
        });
    std::vector<std::int64_t> inOrder(kItems);
    std::iota(inOrder.begin(), inOrder.end(), 0);
    QCOMPARE(used, inOrder);
    // 24 fetches of 50 ms on 4 threads take ~300 ms; item 0 was in after 1 ms.
    QVERIFY2(endedWhenFirstUsed < kItems / 2, qPrintable(QString::number(endedWhenFirstUsed)));
    std::atomic<int> started{0};
    try {
      forEachFetchedInOrder(
          200, 2,
          [&](std::int64_t) {
            ++started;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          },
          [](std::int64_t i) {
            if (i == 1) throw Error(ErrorKind::BadInput, "item 1", "refused");
          });
      QFAIL("use's error was lost");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("item 1") != std::string::npos);
    }
    QVERIFY2(started.load() < 200, "the fetches went on after use failed");
    int inner = 0;
    forEachFetchedInOrder(
        2, 2, [](std::int64_t) {},
        [&](std::int64_t) {
          std::vector<int> seen;
          forEachFetchedInOrder(
              3, 2, [](std::int64_t) {}, [&](std::int64_t i) { seen.push_back(static_cast<int>(i)); });
          QCOMPARE(seen, (std::vector<int>{0, 1, 2}));
          ++inner;
        });
    QCOMPARE(inner, 2);
  }

  void resumeRefusesAnotherSourcesFinishedConversion() {
    fs::create_directories(path("fp_dst"));
    const bool xattrs = ::setxattr(path("fp_dst").c_str(), "user.stoker.probe", "1", 1, 0) == 0;
    QVERIFY2(xattrs || errno == ENOTSUP, strerror(errno));
    if (!xattrs) QSKIP("this file system keeps no user xattrs");
    ::removexattr(path("fp_dst").c_str(), "user.stoker.probe");
    test::writeRanks(path("fp_earlier"), TensorMap{{"w", at::ones({6, 2})}}, 2);
    test::writeRanks(path("fp_later"), TensorMap{{"w", at::full({6, 2}, 2.0)}}, 2);
    QVERIFY(convert(path("fp_earlier"), path("fp_dst"), "single").complete);
    QVERIFY(!ConvertJournal::finishedFingerprint(path("fp_dst")).empty());
    ConvertOptions resume;
    resume.resume = true;
    QCOMPARE(convert(path("fp_earlier"), path("fp_dst"), "single", "keep", resume).alreadyDone,
             std::vector<std::string>{"model.safetensors"});
    expectBadInput([&] { convert(path("fp_later"), path("fp_dst"), "single", "keep", resume); },
                   "holds a finished conversion of another source");
    // Another target has other sizes: nothing there to resume either.
    expectBadInput([&] { convert(path("fp_earlier"), path("fp_dst"), "single", "bf16", resume); }, "has no journal");
    ConvertOptions force;
    force.force = true;
    QVERIFY(convert(path("fp_later"), path("fp_dst"), "single", "keep", force).complete);
    const auto again = convert(path("fp_later"), path("fp_dst"), "single", "keep", resume);
    QVERIFY(again.complete && again.written.empty());
    QCOMPARE(listDir(path("fp_dst")), std::vector<std::string>{"model.safetensors"});
  }

  void optionValidation() {
    TensorMap m{{"w", at::ones({1 << 20})}};  // 4 MiB
    test::writeSingle(path("opt_src"), m);
    ConvertOptions o;
    o.memoryBudget = 8 << 20;
    o.jobs = 2;
    expectBadInput([&] { convert(path("opt_src"), path("opt_a"), "ranks:2", "keep", o); }, "too small for --jobs 2");
    o.jobs = 1;
    expectBadInput([&] { convert(path("opt_src"), path("opt_b"), "pt", "keep", o); }, "must be held whole in memory");
    o = {};
    o.rank = 3;
    o.worldSize = 2;
    expectBadInput([&] { convert(path("opt_src"), path("opt_c"), "ranks:2", "keep", o); }, "--rank 3");
    o = {};
    o.jobs = 0;
    expectBadInput([&] { convert(path("opt_src"), path("opt_d"), "ranks:2", "keep", o); }, "--jobs 0");
    // Two jobs writing a DCP rank file each may hold a 2 MiB item whole at once: 2 x (2 + 8) MiB.
    o = {};
    o.memoryBudget = 16 << 20;
    o.jobs = 2;
    expectBadInput([&] { convert(path("opt_src"), path("opt_e"), "dcp:2", "keep", o); },
                   "each of 2 jobs may hold a tensor whole");
    for (const char* to : {"ranks", "ranks:0", "ranks:x", "hf:12XB", "hf:0", "tar", "single:3"})
      expectBadInput([&] { parseTargetSpec(to, "keep"); }, "--to");
    expectBadInput([&] { parseTargetSpec("single", "f8"); }, "--dtype f8");
    for (const char* p : {"opt_a", "opt_b", "opt_c", "opt_d", "opt_e"}) QVERIFY(!fs::exists(path(p)));
    o.jobs = 1;  // one job holds one item at a time: within the budget
    convert(path("opt_src"), path("opt_f"), "dcp:2", "keep", o);
    QVERIFY(fs::exists(path("opt_f/.metadata")));
  }

  void cancelKeepsFinishedFilesAndResumes() {
    at::manual_seed(1);
    TensorMap m;
    for (int i = 0; i < 6; ++i) m["t" + std::to_string(i)] = at::randn({256, 1024});  // 1 MiB each
    test::writeRanks(path("cancel_src"), m, 3);
    CancelToken token;
    CancelAfter sink(token, 3 << 20);  // cancel in the middle of the second output file
    ConvertOptions o;
    o.jobs = 1;
    o.memoryBudget = 16 << 20;
    o.progress = &sink;
    o.progressIntervalMs = 0;
    o.cancel = &token;
    try {
      convert(path("cancel_src"), path("cancel_out"), "ranks:4", "keep", o);
      QFAIL("not cancelled");
    } catch (const Error& e) {
      QVERIFY2(e.kind() == ErrorKind::Cancelled, e.what());
      QVERIFY(QString(e.what()).contains("--resume"));
    }
    // Only complete files under final names, no temporaries, a journal.
    auto names = listDir(path("cancel_out"));
    QVERIFY(std::count(names.begin(), names.end(), ".stoker-journal"));
    QVERIFY(!std::count(names.begin(), names.end(), "metadata.json"));
    int finals = 0;
    for (const auto& n : names) {
      QVERIFY2(n.find("stoker-tmp") == std::string::npos, n.c_str());
      if (n.rfind("rank_", 0) == 0) {
        ++finals;
        SafetensorsFile::open(path("cancel_out/" + n));  // complete and valid
      }
    }
    QVERIFY(finals >= 1 && finals < 4);
    ConvertOptions resume;
    resume.resume = true;
    ConvertReport r = convert(path("cancel_src"), path("cancel_out"), "ranks:4", "keep", resume);
    QCOMPARE(static_cast<int>(r.alreadyDone.size()), finals);
    QCOMPARE(static_cast<int>(r.written.size()), 4 - finals);
    QVERIFY(r.complete);
    QCOMPARE(test::differences(m, test::readFull(path("cancel_out"))), std::string());
    // Resuming a different conversion into it is refused.
    fs::create_directories(path("cancel_out/.stoker-journal"));
    std::ofstream(path("cancel_out/.stoker-journal/plan")) << "0123456789abcdef\n";
    expectBadInput([&] { convert(path("cancel_src"), path("cancel_out"), "ranks:2", "keep", resume); },
                   "different source or target");
  }

  // A source file cut short while it is copied (another job rewrote it): the error names that
  // source file, not the output being written, on the kernel-copy paths of safetensors and DCP.
  void aSourceCutShortIsNamed() {
    at::manual_seed(2);
    TensorMap m;
    for (int i = 0; i < 4; ++i) m["t" + std::to_string(i)] = at::randn({256, 1024});  // 1 MiB each
    test::writeRanks(path("cut_src"), m, 2);
    for (const char* to : {"single", "dcp:1"}) {
      struct Truncate : ProgressSink {
        std::string victim;
        bool done = false;
        void progress(const ProgressUpdate&) override {
          if (!done) fs::resize_file(victim, 4096), done = true;
        }
      } cut;
      const std::string src = path(std::string("cut_src_") + to[0]);
      fs::copy(path("cut_src"), src, fs::copy_options::recursive);
      cut.victim = src + "/rank_1.safetensors";
      ConvertOptions o;
      o.jobs = 1;
      o.progress = &cut;
      o.progressIntervalMs = 0;
      try {
        convert(src, path(std::string("cut_out_") + to[0]), to, "keep", o);
        QFAIL(to);
      } catch (const Error& e) {
        QVERIFY2(e.kind() == ErrorKind::Io && std::string(e.what()).find(cut.victim) == 0, e.what());
        QVERIFY2(std::string(e.what()).find("changed during the conversion") != std::string::npos, e.what());
      }
    }
  }

  void scaleOutSharesTheOutputs() {
    TensorMap model = test::sampleModel(9);
    test::writeRanks(path("so_src"), model, 2);
    // Three cooperating "processes" (sequential here; the CLI suite runs real ones).
    std::vector<ConvertReport> reports;
    // What a process of this host killed while writing leaves: the next cooperating process (not
    // run with --resume) removes it, and the finished checkpoint holds no temporary.
    const std::string orphan = path("so_out/.rank_2.safetensors.stoker-tmp-" + std::to_string(INT32_MAX - 7) + "-0." + tempHost());
    for (int r : {1, 2, 0}) {
      ConvertOptions o;
      o.rank = r;
      o.worldSize = 3;
      reports.push_back(convert(path("so_src"), path("so_out"), "ranks:5", "keep", o));
      if (r == 1) std::ofstream(orphan) << "half a file";
    }
    QVERIFY(!fs::exists(orphan));
    QVERIFY(!reports[0].complete && !reports[1].complete);
    QVERIFY(reports[2].complete && reports[2].indexWritten);
    QCOMPARE(reports[0].written, (std::vector<std::string>{"rank_1.safetensors", "rank_4.safetensors"}));
    QCOMPARE(reports[1].written, (std::vector<std::string>{"rank_2.safetensors"}));
    QCOMPARE(reports[2].written, (std::vector<std::string>{"rank_0.safetensors", "rank_3.safetensors"}));
    QCOMPARE(test::differences(model, test::readFull(path("so_out"))), std::string());
    QVERIFY(!fs::exists(path("so_out/.stoker-journal")));
  }

  void asyncSaverWritesTheRanksLayout() {
    TensorMap model = test::sampleModel(2);
    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const auto& [k, v] : model) shapes[k] = v.sizes().vec();
    ShardSpecs specs = evenShardSpecs(shapes, 2);
    for (int rank : {1, 0}) {
      AsyncCheckpointer saver(path("async"), rank, 2, specs);
      std::vector<std::pair<std::string, at::Tensor>> local;
      for (const auto& [k, v] : model) {
        const auto& s = specs.at(k);
        at::Tensor part = v;
        if (s.shardDim) {
          std::int64_t start = 0;
          for (int r = 0; r < rank; ++r) start += s.shardSizes[r];
          part = v.narrow(*s.shardDim, start, s.shardSizes[rank]);
        }
        local.emplace_back(k, part.clone());
      }
      SaveFuture f = saver.save(local, 100);
      for (auto& [k, v] : local) v.zero_();  // training goes on: the staged copy must not change
      f.wait();
      f.wait();  // idempotent
      QVERIFY(f.isDone());
    }
    QCOMPARE(test::differences(model, test::readFull(path("async"))), std::string());
    QVERIFY(inspectCheckpoint(path("async")).problems.empty());

    // A second save into the same directory where rank 1 has not written yet (still running, or
    // killed): rank 0's file and metadata.json say step 200, rank 1's step 100. Shapes and dtypes
    // agree, so it loaded as one checkpoint of two steps; now it is refused, naming the steps.
    auto saveRank = [&](int rank, std::int64_t step, float value) {
      AsyncCheckpointer saver(path("async"), rank, 2, specs);
      std::vector<std::pair<std::string, at::Tensor>> local;
      for (const auto& [k, v] : model) {
        const auto& s = specs.at(k);
        std::vector<std::int64_t> shape = v.sizes().vec();
        if (s.shardDim) shape[*s.shardDim] = s.shardSizes[rank];
        local.emplace_back(k, at::full(shape, value, v.options()));
      }
      saver.save(local, step).wait();
    };
    saveRank(0, 200, 2.0f);
    const CheckpointInfo mixed = inspectCheckpoint(path("async"));
    QVERIFY(!mixed.problems.empty());
    QVERIFY2(QString::fromStdString(mixed.problems.front())
                 .contains("rank_1.safetensors is from save step 100, metadata.json from step 200: a save into this "
                           "directory is still running or was interrupted"),
             mixed.problems.front().c_str());
    expectBadInput([&] { convert(path("async"), path("async_mixed_out"), "single"); }, "save step 100");
    saveRank(1, 200, 2.0f);  // the save completes: one checkpoint again
    QVERIFY(inspectCheckpoint(path("async")).problems.empty());
  }

  void asyncSaverRefusesASecondSaveInFlight() {
    std::map<std::string, std::vector<std::int64_t>> shapes{{"big", {64 << 20}}};  // 256 MiB
    AsyncCheckpointer saver(path("async_busy"), 0, 1, evenShardSpecs(shapes, 1));
    std::vector<std::pair<std::string, at::Tensor>> sd{{"big", at::ones({64 << 20})}};
    SaveFuture first = saver.save(sd, 1);
    if (!first.isDone())
      expectBadInput([&] { saver.save(sd, 2); }, "a save is already in flight");
    first.wait();
    SaveFuture second = saver.save(sd, 2);  // fine once the first is done
    second.wait();
    // A wrong shape or a missing tensor is refused before anything is staged.
    expectBadInput([&] { saver.save({{"big", at::ones({3})}}, 3); }, "wrong shape");
    expectBadInput([&] { saver.save({}, 3); }, "missing from the state dict");
    expectBadInput([&] { saver.save(sd, -1); }, "step must be 0 or more");
  }

  void asyncSaverErrorsReachWait() {
    std::ofstream(path("not_a_dir")) << "x";
    AsyncCheckpointer saver(path("not_a_dir/ckpt"), 0, 1, evenShardSpecs({{"w", {4}}}, 1));
    SaveFuture f = saver.save({{"w", at::ones({4})}}, 0);
    for (int i = 0; i < 2; ++i) {
      try {
        f.wait();
        QFAIL("no error");
      } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("cannot create"), e.what());
      }
    }
  }

  void asyncSaverOnCuda() {
    if (!at::hasCUDA()) QSKIP("no CUDA device: the pinned-memory staging path needs a GPU");
    TensorMap model{{"w", at::randn({1000, 16})}};
    AsyncCheckpointer saver(path("async_cuda"), 0, 1, evenShardSpecs({{"w", {1000, 16}}}, 1));
    SaveFuture f = saver.save({{"w", model["w"].cuda()}}, 0);
    f.wait();
    QCOMPARE(test::differences(model, test::readFull(path("async_cuda"))), std::string());
  }
};

QTEST_GUILESS_MAIN(TestCkptReshard)
#include "tst_ckpt_reshard.moc"
