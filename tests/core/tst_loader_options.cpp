// LoaderOptions: builder and presets, validation messages that name the field
// and the allowed range, JSON round trips and refusals, the knob table, and
// exported PyTorch snippets that Debian's PyTorch actually runs.
#include <QtTest>

#include <QJsonDocument>
#include <QJsonObject>

#include <thread>

#include "data/loader_options.h"
#include "data/loader_sweep.h"
#include "expect_error.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;

using stoker::test::expectBadInput;

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
    QTest::newRow("workers") << R"({"batch_size": 8, "num_workers": 2, "prefetch": 4, "multiprocessing_context": "spawn"})";
    QTest::newRow("distributed") << R"({"batch_size": 5, "num_workers": 0, "sampler_type": "distributed", "shard_rank": 1, "shard_world_size": 3})";
    QTest::newRow("replacement") << R"({"batch_size": 4, "num_workers": 0, "sampler_type": "random_with_replacement", "num_samples": 20})";
    QTest::newRow("sequential") << R"({"batch_size": 4, "num_workers": 0, "sampler_type": "sequential", "drop_last": false})";
  }
  void pytorchSnippetRuns() {
    QFETCH(QString, json);
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    const std::string snippet = exportPyTorchSnippet(loaderOptionsFromJson(json.toStdString()));
    const QString script = "import torch\nfrom torch.utils.data import TensorDataset\n"
                           "dataset = TensorDataset(torch.arange(40.0).reshape(40, 1))\n" +
                           QString::fromStdString(snippet) +
                           "batches = list(loader)\nprint(len(batches), tuple(batches[0][0].shape))\n";
    auto r = stoker::test::runPython(script);
    QVERIFY2(r.exitCode == 0, qPrintable(QString::fromUtf8(r.err) + "\n" + script));
    QVERIFY(!r.out.trimmed().isEmpty());
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
