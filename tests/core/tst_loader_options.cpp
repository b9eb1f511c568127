// LoaderOptions: builder and presets, validation messages that name the field
// and the allowed range, JSON round trips and refusals, the knob table, and
// exported PyTorch snippets that Debian's PyTorch actually runs.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <thread>

#include <ATen/ATen.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/datasets/tensor_dataset.h"
#include "data/loader.h"
#include "data/loader_options.h"
#include "data/loader_sweep.h"
#include "expect_error.h"
#include "snippet_cases.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;

using stoker::test::expectBadInput;

// The exported C++ snippets, compiled into this test (snippet_gen writes them at build time).
#define STOKER_DECLARE_CASE(name, json)            \
  stoker::LoaderOptions stokerOptions_##name(); \
  void feedEpochs_##name(std::shared_ptr<stoker::Dataset> dataset, std::int64_t epochs);
STOKER_SNIPPET_CASES(STOKER_DECLARE_CASE)
#undef STOKER_DECLARE_CASE

class TestLoaderOptions : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void sweepAxesAndCombinations() {
    const SweepAxis workers = parseSweepAxis("num_workers", " 0, 2 ,4");
    QCOMPARE(workers.values, (std::vector<std::string>{"0", "2", "4"}));
    QCOMPARE(parseSweepAxis("loading_mode", "resident,streaming").values,
             (std::vector<std::string>{"\"resident\"", "\"streaming\""}));
    QCOMPARE(parseSweepAxis("pin_memory", "true,false").values, (std::vector<std::string>{"true", "false"}));
    QCOMPARE(expectBadInput([] { parseSweepAxis("prefetch", " , "); }, {"prefetch: no values to sweep"}), QString());
    LoaderOptions base;
    auto points = sweepPoints(base, {workers, parseSweepAxis("prefetch", "0,8")});
    QCOMPARE(points.size(), std::size_t(6));
    QCOMPARE(points[1].values, (std::vector<std::string>{"0", "8"}));  // the last axis varies fastest
    QCOMPARE(points[1].options.prefetch, 8);
    QCOMPARE(points[5].options.num_workers, 4);
    // An invalid combination stays in the table with the core's message.
    QVERIFY(points[0].error.find("prefetch: must be 1-1024") != std::string::npos);
    QVERIFY(points[1].error.empty());
    // A knob that does not exist or a value of the wrong type refuses the sweep.
    QCOMPARE(expectBadInput([&] { sweepPoints(base, {parseSweepAxis("num_wrokers", "1")}); }, {"num_wrokers: not a loader knob"}), QString());
    QCOMPARE(expectBadInput([&] { sweepPoints(base, {parseSweepAxis("prefetch", "two")}); }, {"prefetch: must be an integer"}), QString());
    QCOMPARE(expectBadInput([&] { sweepPoints(base, {parseSweepAxis("loading_mode", "hbm")}); }, {"loading_mode: unknown value"}), QString());
    QCOMPARE(expectBadInput([&] { sweepPoints(base, {}); }, {"sweep: choose at least one knob"}), QString());
    QCOMPARE(expectBadInput([&] { sweepPoints(base, {parseSweepAxis("seed", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"),
                                                     parseSweepAxis("prefetch", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16")}); },
                            {"more than 256 combinations"}),
             QString());
  }

  void builderAndPresets() {
    LoaderOptions o = LoaderOptions::builder().batchSize(256).numWorkers(3).shard(1, 4).sampler(SamplerType::Distributed)
                          .timeout(2.5).vramMaxUsage(0.8).reuseBuffers(true).build();
    QCOMPARE(o.batch_size, 256);
    QCOMPARE(o.num_workers, 3);
    QCOMPARE(o.shard_rank, 1);
    QCOMPARE(o.shard_world_size, 4);
    QCOMPARE(o.timeout, 2.5);
    QVERIFY(o.reuse_buffers);
    QCOMPARE(gpuOptimized().num_workers, static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1));
    // The ring keeps every worker busy: two batches each, at least 8 (a fixed 8 idled 7 of 15 workers).
    QCOMPARE(gpuOptimized().prefetch, std::max(8, 2 * gpuOptimized().num_workers));
    QCOMPARE(prefetchForWorkers(0), 8);
    QCOMPARE(prefetchForWorkers(15), 30);
    QCOMPARE(prefetchForWorkers(100000), 1024);
    LoaderOptions d = distributedOptimized(2, 8);
    QCOMPARE(d.sampler_type, SamplerType::Distributed);
    QCOMPARE(d.shard_rank, 2);
    QCOMPARE(d.shard_world_size, 8);
    QCOMPARE(debugMode().num_workers, 0);
    QVERIFY(!debugMode().shuffle);
    QCOMPARE(presetByName("debug_mode").timeout, debugMode().timeout);
    QCOMPARE(expectBadInput([] { presetByName("fast"); }, {"preset fast", "gpu_optimized"}), QString());
    QCOMPARE(expectBadInput([] { distributedOptimized(4, 4); }, {"shard_rank", "0-3"}), QString());
  }

  void validationNamesFieldAndRange_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QStringList>("parts");
    QTest::newRow("batch_size 0") << R"({"batch_size": 0})" << QStringList{"batch_size", "at least 1", "got 0"};
    QTest::newRow("vram low") << R"({"vram_max_usage": 0.3})" << QStringList{"vram_max_usage", "0.50-0.99", "got 0.3"};
    QTest::newRow("vram high") << R"({"vram_max_usage": 1.0})" << QStringList{"vram_max_usage", "0.50-0.99", "got 1"};
    QTest::newRow("rank >= world") << R"({"shard_rank": 2, "shard_world_size": 2})" << QStringList{"shard_rank", "0-1", "got 2"};
    QTest::newRow("negative timeout") << R"({"timeout": -1})" << QStringList{"timeout", "got -1"};
    QTest::newRow("unknown sampler") << R"({"sampler_type": "fancy"})"
                                     << QStringList{"sampler_type", "fancy", "sequential, random"};
    QTest::newRow("unknown mode") << R"({"loading_mode": "vram"})" << QStringList{"loading_mode", "auto, resident, streaming"};
    QTest::newRow("unknown normalize_on") << R"({"normalize_on": "gpu"})" << QStringList{"normalize_on", "gpu", "auto, host, device"};
    QTest::newRow("unknown key") << R"({"batchsize": 3})" << QStringList{"batchsize", "unknown option"};
    QTest::newRow("wrong type") << R"({"batch_size": "big"})" << QStringList{"batch_size", "an integer"};
    QTest::newRow("bool type") << R"({"shuffle": 1})" << QStringList{"shuffle", "a boolean"};
    QTest::newRow("negative seed") << R"({"seed": -5})" << QStringList{"seed", "non-negative"};
    QTest::newRow("workers") << R"({"num_workers": -1})" << QStringList{"num_workers", "0-256"};
    QTest::newRow("prefetch") << R"({"prefetch": 0})" << QStringList{"prefetch", "1-1024"};
    QTest::newRow("weighted without weights") << R"({"sampler_type": "weighted"})" << QStringList{"weights", "one weight"};
    QTest::newRow("negative weight") << R"({"sampler_type": "weighted", "weights": [1, -2]})" << QStringList{"weights", "non-negative"};
    QTest::newRow("zero weights") << R"({"sampler_type": "weighted", "weights": [0, 0]})" << QStringList{"weights", "all be zero"};
    QTest::newRow("mp context") << R"({"multiprocessing_context": "thread"})" << QStringList{"multiprocessing_context", "spawn"};
    QTest::newRow("part size") << R"({"part_size": 10})" << QStringList{"part_size", "4096"};
    QTest::newRow("cache limit") << R"({"cache_limit": -1})" << QStringList{"cache_limit", "no limit"};
    QTest::newRow("cache dir") << R"({"cache_dir": 5})" << QStringList{"cache_dir", "a string"};
    QTest::newRow("telemetry") << R"({"telemetry_interval_ms": 1})" << QStringList{"telemetry_interval_ms", "at least 10"};
    QTest::newRow("not json") << "{batch_size: 3" << QStringList{"not valid JSON"};
    QTest::newRow("not an object") << "[1, 2]" << QStringList{"JSON object"};
  }
  void validationNamesFieldAndRange() {
    QFETCH(QString, json);
    QFETCH(QStringList, parts);
    QCOMPARE(expectBadInput([&] { loaderOptionsFromJson(json.toStdString()); }, parts), QString());
  }

  void builderValidates() {
    QCOMPARE(expectBadInput([] { LoaderOptions::builder().batchSize(0).build(); }, {"batch_size"}), QString());
    QCOMPARE(expectBadInput([] { LoaderOptions::builder().vramMaxUsage(0.995).build(); }, {"vram_max_usage"}), QString());
  }

  void jsonRoundTrip() {
    LoaderOptions o = LoaderOptions::builder().batchSize(7).seed(99).sampler(SamplerType::Weighted).weights({1, 2, 0.5})
                          .loadingMode(LoadingMode::Streaming).memoryFormat(MemoryFormat::Nhwc).readerMode(ReaderMode::Read)
                          .multiprocessingContext("spawn").timeout(1.5).build();
    const QString path = dir_.filePath("options.json");
    saveLoaderOptions(path.toStdString(), o);
    LoaderOptions back = loadLoaderOptions(path.toStdString());
    QCOMPARE(QString::fromStdString(loaderOptionsToJson(back)), QString::fromStdString(loaderOptionsToJson(o)));
    QCOMPARE(back.weights.size(), std::size_t(3));
    // A partial file starts from the defaults.
    LoaderOptions partial = loaderOptionsFromJson(R"({"batch_size": 64})");
    QCOMPARE(partial.batch_size, 64);
    QCOMPARE(partial.prefetch, LoaderOptions{}.prefetch);
    // An integer wider than its knob is refused, not wrapped (4294967298 workers became 2, a world
    // of 4294967300 ranks became 4).
    for (const char* wide : {"{\"num_workers\": 4294967298}", "{\"shard_world_size\": 4294967300}", "{\"shard_rank\": -4294967296}"}) {
      try {
        loaderOptionsFromJson(wide);
        QFAIL(wide);
      } catch (const Error& e) {
        QVERIFY2(e.kind() == ErrorKind::BadInput && QString(e.what()).contains("to 2147483647"), e.what());
      }
    }
    try {
      loadLoaderOptions(dir_.filePath("missing.json").toStdString());
      QFAIL("a missing file was accepted");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Io);
    }
  }

  void everyKnobIsDocumented() {
    // Each JSON key has a row in the knob table; export-only ones say so.
    QJsonObject keys = QJsonDocument::fromJson(QByteArray::fromStdString(loaderOptionsToJson(LoaderOptions{}))).object();
    QStringList documented;
    for (const auto& k : knobTable()) {
      documented << QString::fromStdString(k.name);
      QVERIFY(!k.effect.empty());
      QVERIFY(!k.group.empty());
      QVERIFY(!k.pytorch.empty());
      QCOMPARE(k.exportOnly, k.name == "multiprocessing_context");
    }
    for (const auto& key : keys.keys()) QVERIFY2(documented.contains(key), qPrintable(key));
    QCOMPARE(documented.size(), keys.size());
  }

  void pytorchSnippetRuns_data() {
    QTest::addColumn<QString>("json");
    QTest::newRow("random") << R"({"batch_size": 8, "num_workers": 0, "seed": 3})";
    QTest::newRow("random-partial") << R"({"batch_size": 6, "num_workers": 0, "seed": 11, "drop_last": false})";
    QTest::newRow("workers") << R"({"batch_size": 8, "num_workers": 2, "prefetch": 4, "multiprocessing_context": "spawn"})";
    QTest::newRow("unshuffled") << R"({"batch_size": 7, "num_workers": 0, "shuffle": false, "drop_last": false})";
    QTest::newRow("distributed") << R"({"batch_size": 5, "num_workers": 0, "sampler_type": "distributed", "shard_rank": 1, "shard_world_size": 3, "seed": 5})";
    QTest::newRow("distributed-drop") << R"({"batch_size": 4, "num_workers": 1, "sampler_type": "distributed", "shard_rank": 2, "shard_world_size": 3, "drop_last": true, "shuffle": false})";
    QTest::newRow("replacement") << R"({"batch_size": 4, "num_workers": 0, "sampler_type": "random_with_replacement", "num_samples": 70, "seed": 9})";
    QTest::newRow("sequential") << R"({"batch_size": 4, "num_workers": 0, "sampler_type": "sequential", "drop_last": false})";
    QTest::newRow("weighted") << R"({"batch_size": 5, "num_workers": 0, "sampler_type": "weighted", "num_samples": 33, "seed": 2, "drop_last": false})";
    // On several ranks, one draw dealt across them (each rank's share, as DistributedSampler deals):
    // before, every rank took the whole draw, so every GPU trained on the same batches.
    QTest::newRow("weighted-rank-1-of-3") << R"({"batch_size": 5, "num_workers": 0, "sampler_type": "weighted", "num_samples": 34, "seed": 2, "drop_last": false, "shard_rank": 1, "shard_world_size": 3})";
    // A timeout without workers: DataLoader asserts timeout == 0 at the first batch (debug_mode's
    // export crashed there); with workers, the seconds exactly.
    QTest::newRow("timeout-no-workers") << R"({"batch_size": 4, "num_workers": 0, "timeout": 60, "seed": 1})";
    QTest::newRow("timeout-workers") << R"({"batch_size": 4, "num_workers": 1, "timeout": 30.1234567891, "seed": 1})";
    QTest::newRow("replacement-rank-2-of-4-drop") << R"({"batch_size": 3, "num_workers": 0, "sampler_type": "random_with_replacement", "num_samples": 70, "seed": 9, "drop_last": true, "shard_rank": 2, "shard_world_size": 4})";
  }
  // The exported DataLoader, run by Debian's torch, serves the same samples in the same batches
  // as Stoker's loader with those options, epoch after epoch (set_epoch before each).
  void pytorchSnippetRuns() {
    QFETCH(QString, json);
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    constexpr int n = 40, epochs = 3;
    nlohmann::json j = nlohmann::json::parse(json.toStdString());
    if (j.value("sampler_type", "") == "weighted")
      for (int i = 0; i < n; ++i) j["weights"].push_back(0.25 + (i % 7) * 1.5);
    const LoaderOptions o = loaderOptionsFromJson(j.dump());
    const QString weightsFile = dir_.filePath(QString("weights-%1.json").arg(QTest::currentDataTag()));
    if (!o.weights.empty()) saveWeightsFile(weightsFile.toStdString(), o.weights);
    const std::string snippet = exportPyTorchSnippet(o, "dataset", weightsFile.toStdString());
    const QString script = "import json, torch\nfrom torch.utils.data import TensorDataset\n"
                           "dataset = TensorDataset(torch.arange(" + QString::number(n) + "))\n" +
                           QString::fromStdString(snippet) +
                           "out = []\nfor epoch in range(" + QString::number(epochs) + "):\n"
                           "    set_epoch(epoch)\n"
                           "    out.append([batch[0].tolist() for batch in loader])\n"
                           "print(json.dumps(out))\n";
    auto r = stoker::test::runPython(script);
    QVERIFY2(r.exitCode == 0, qPrintable(QString::fromUtf8(r.err) + "\n" + script));
    const QJsonArray torchEpochs = QJsonDocument::fromJson(r.out).array();
    QCOMPARE(torchEpochs.size(), epochs);

    auto values = at::arange(n, at::kLong);
    Loader loader(std::make_shared<TensorDataset>("numbers", std::vector<std::string>{"v"}, std::vector<at::Tensor>{values}),
                  o, DeviceSpec::parse("cpu"));
    for (int e = 0; e < epochs; ++e) {
      QJsonArray stokerBatches;
      for (const Batch& b : loader.epoch(e)) {
        QJsonArray batch;
        const auto* idx = b.indices.data_ptr<std::int64_t>();
        for (std::int64_t i = 0; i < b.size(); ++i) batch.append(static_cast<qint64>(idx[i]));
        stokerBatches.append(batch);
      }
      const QJsonArray torchBatches = torchEpochs[e].toArray();
      QVERIFY2(!stokerBatches.isEmpty(), "no batches");
      QVERIFY2(torchBatches == stokerBatches,
               qPrintable(QString("epoch %1\ntorch:  %2\nstoker: %3\n%4")
                              .arg(e)
                              .arg(QString::fromUtf8(QJsonDocument(torchBatches).toJson(QJsonDocument::Compact)),
                                   QString::fromUtf8(QJsonDocument(stokerBatches).toJson(QJsonDocument::Compact)),
                                   QString::fromStdString(snippet))));
    }
  }

  // The weights file round-trips exactly, and a bad one is refused naming the file.
  void weightsFiles() {
    const std::vector<double> w{0.1, 1.0 / 3.0, 2.5e-300, 7};
    const std::string path = dir_.filePath("w.json").toStdString();
    saveWeightsFile(path, w);
    QCOMPARE(loadWeightsFile(path), w);
    const std::string bad = dir_.filePath("bad.json").toStdString();
    for (const char* text : {"{\"w\": 1}", "[1, \"two\"]", "not json"}) {
      std::ofstream(bad) << text;
      QCOMPARE(expectBadInput([&] { loadWeightsFile(bad); }, {QString::fromStdString(bad + ": ")}), QString());
    }
    QCOMPARE(expectBadInput([&] { loadWeightsFile(bad + ".missing"); }, {"cannot open the weights file"}), QString());
  }

  // Each case's snippet compiled against the core: stokerOptions() rebuilds exactly the options
  // it was exported from (every knob changed in "tuned", the weights through their file), and
  // feedEpochs() runs its epochs on the CPU.
  void cppSnippetCompilesAndRebuildsTheOptions() {
    auto dataset = std::make_shared<TensorDataset>("numbers", std::vector<std::string>{"v"},
                                                   std::vector<at::Tensor>{at::arange(stoker::test::kSnippetSamples, at::kLong)});
    int cases = 0;
#define STOKER_CHECK_CASE(name, json)                                                                            \
  {                                                                                                              \
    const LoaderOptions expected = stoker::test::snippetCaseOptions(json);                                       \
    QCOMPARE(QString::fromStdString(loaderOptionsToJson(stokerOptions_##name())),                                \
             QString::fromStdString(loaderOptionsToJson(expected)));                                             \
    feedEpochs_##name(dataset, 2);                                                                               \
    ++cases;                                                                                                     \
  }
    STOKER_SNIPPET_CASES(STOKER_CHECK_CASE)
#undef STOKER_CHECK_CASE
    QCOMPARE(cases, 4);
    // "tuned" changes every knob from its default, so every builder line is exercised.
    const nlohmann::json tuned = nlohmann::json::parse(loaderOptionsToJson(stokerOptions_tuned()));
    const nlohmann::json defaults = nlohmann::json::parse(loaderOptionsToJson(LoaderOptions{}));
    QStringList same;
    for (const auto& [key, value] : defaults.items())
      if (tuned[key] == value && key != "sampler_type" && key != "weights" && key != "num_samples" &&
          key != "shard_rank" && key != "shard_world_size" && key != "shuffle")
        same << QString::fromStdString(key);
    QVERIFY2(same.isEmpty(), qPrintable("knobs the tuned case leaves at their default: " + same.join(", ")));
  }

  void cppSnippetNamesTheChangedKnobs() {
    LoaderOptions o = LoaderOptions::builder().batchSize(128).shuffle(false).shard(0, 2).sampler(SamplerType::Distributed)
                          .reuseBuffers(true).build();
    const QString s = QString::fromStdString(exportCppSnippet(o));
    QVERIFY(s.contains(".batchSize(128)"));
    QVERIFY(s.contains(".shuffle(false)"));
    QVERIFY(s.contains(".shard(0, 2)"));
    QVERIFY(s.contains("SamplerType::Distributed"));
    QVERIFY(s.contains(".reuseBuffers(true)"));
    QVERIFY(!s.contains(".pinMemory"));  // defaults are left out
  }
};

QTEST_GUILESS_MAIN(TestLoaderOptions)
#include "tst_loader_options.moc"
