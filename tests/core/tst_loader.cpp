// The loader on CPU and simulated devices: batches hold the right samples in
// the sampler's order, determinism, partial last batches, buffer aliasing,
// mode choice, OOM fallback, prefetch depth adaptation, cancel, timeout,
// worker errors, persistent workers, and no leaks over 1000 short epochs.
#include <QtTest>

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <fstream>
#include <chrono>
#include <thread>

#include "io/host_tensor_torch.h"
#include "data/datasets/synthetic_dataset.h"
#include "data/datasets/tensor_dataset.h"
#include "data/device.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "data/loader_session.h"
#include "data/loader_sweep.h"
#include "data/loader_tune.h"
#include "data/sampler.h"
#include "data/worker_pool.h"
#include "io/safetensors_writer.h"
#include "expect_error.h"
#include "io/host_tensor.h"
#include "epoch_counting_dataset.h"
#include "numbered_dataset.h"
#include "util/error.h"
#include "util/progress.h"

using namespace stoker;
using stoker::test::EpochCountingDataset;
using stoker::test::numbered;

namespace {


// Samples that misbehave at one index: throw, or stall for `stallMs`.
class FaultyDataset : public Dataset {
 public:
  FaultyDataset(std::int64_t badIndex, int stallMs) : bad_(badIndex), stallMs_(stallMs) {
    specs_ = {FieldSpec{"v", c10::ScalarType::Long, {}, 8}};
  }
  std::string description() const override { return "faulty"; }
  std::int64_t size() const override { return 500; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override {
    if (index == bad_) {
      if (stallMs_ == 0) throw std::runtime_error("corrupt record");
      std::this_thread::sleep_for(std::chrono::milliseconds(stallMs_));
    }
    std::memcpy(dst[0], &index, 8);
  }

 private:
  std::int64_t bad_;
  int stallMs_;
  std::vector<FieldSpec> specs_;
};

// Logs every sample read and calls a hook with the count so far (live retune tests).
struct HookedDataset : Dataset {
  explicit HookedDataset(std::int64_t n) : n(n) {}
  std::int64_t n;
  std::vector<FieldSpec> specs{FieldSpec{"v", c10::ScalarType::Long, {}, 8}};
  mutable std::mutex m;
  mutable std::vector<std::int64_t> read;
  std::function<void(std::size_t)> onRead;
  std::string description() const override { return "hooked"; }
  std::int64_t size() const override { return n; }
  const std::vector<FieldSpec>& fields() const override { return specs; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override {
    std::size_t count;
    {
      std::lock_guard<std::mutex> lock(m);
      read.push_back(index);
      count = read.size();
    }
    if (onRead) onRead(count);
    std::memcpy(dst[0], &index, 8);
  }
};

// The indices an epoch serves, checking that every batch says its epoch and number and holds its
// own samples. Empty on a mismatch (QVERIFY the size).
std::vector<std::int64_t> drain(Epoch& epoch, std::int64_t e) {
  std::vector<std::int64_t> got;
  std::int64_t index = 0;
  while (auto b = epoch.next()) {
    if (b->epoch != e || b->index != index++ || !at::equal((*b)["v"], b->indices)) return {};
    for (std::int64_t i = 0; i < b->size(); ++i) got.push_back(b->indices[i].item<std::int64_t>());
  }
  return got;
}

// Checks every batch against the dataset and the sampler's order.
QString checkEpoch(Loader& loader, std::int64_t e, const LoaderOptions& o, std::int64_t n) {
  const auto order = epochIndices(o, n, e);
  std::int64_t pos = 0, batches = 0;
  for (const Batch& b : loader.epoch(e)) {
    const auto count = b.size();
    at::Tensor expectIdx = at::from_blob(const_cast<std::int64_t*>(order.data()) + pos, {count}, at::kLong);
    if (!at::equal(b.indices, expectIdx)) return QString("batch %1: wrong indices").arg(b.index);
    if (!at::equal(b["y"].cpu(), expectIdx)) return QString("batch %1: labels are not the samples' own").arg(b.index);
    at::Tensor expectX = expectIdx.to(at::kFloat).unsqueeze(1) + at::arange(4, at::kFloat).unsqueeze(0) * 0.5;
    if (!at::equal(b["x"].cpu(), expectX)) return QString("batch %1: wrong x rows").arg(b.index);
    pos += count;
    ++batches;
  }
  const std::int64_t expected = o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
  if (batches != expected) return QString("%1 batches, expected %2").arg(batches).arg(expected);
  return {};
}

int threadCount() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "Threads:") {
      int n = 0;
      in >> n;
      return n;
    }
  }
  return -1;
}

// The thread count once threads of earlier tests (a loader's workers finishing their exit) are
// gone: the same count for 100 ms, waiting at most 3 s.
int settledThreadCount() {
  int last = threadCount();
  for (int stable = 0, waited = 0; stable < 10 && waited < 300; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int now = threadCount();
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  return last;
}

// AnonHugePages (KiB) of the mapping that holds `p`, from /proc/self/smaps; -1 if none holds it.
std::int64_t anonHugeKiB(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = at >= lo && at < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::stoll(line.substr(14));
    }
  }
  return -1;
}

std::string errorOf(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "no error";
}

class Recorder : public TelemetryObserver {
 public:
  void onRecord(const TelemetryRecord& r) override {
    std::lock_guard<std::mutex> lock(mutex);
    records.push_back(r);
  }
  std::mutex mutex;
  std::vector<TelemetryRecord> records;
};

}  // namespace

class TestLoader : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void batchesHoldTheSamplersOrder_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("workers");
    QTest::addColumn<QString>("device");
    for (QString mode : {"resident", "streaming"})
      for (int workers : {0, 1, 3})
        for (QString device : {"cpu", "sim:0"})
          QTest::newRow(qPrintable(QString("%1 %2w %3").arg(mode).arg(workers).arg(device))) << mode << workers << device;
  }
  void batchesHoldTheSamplersOrder() {
    QFETCH(QString, mode);
    QFETCH(int, workers);
    QFETCH(QString, device);
    LoaderOptions o = LoaderOptions::builder().batchSize(64).numWorkers(workers).seed(3).dropLast(false)
                          .loadingMode(mode == "resident" ? LoadingMode::Resident : LoadingMode::Streaming).build();
    Loader loader(numbered(), o, DeviceSpec::parse(device.toStdString()));
    QCOMPARE(loadingModeName(loader.mode()), mode.toStdString());
    for (int e = 0; e < 3; ++e) QCOMPARE(checkEpoch(loader, e, o, 1000), QString());
    QVERIFY(loader.lastEpoch().completed);
    QCOMPARE(loader.lastEpoch().samples, 1000);
  }

  void partialLastBatch() {
    for (bool drop : {false, true}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(300).dropLast(drop).build();
      Loader loader(numbered(), o);
      std::vector<std::int64_t> sizes;
      for (const Batch& b : loader.epoch(0)) sizes.push_back(b.size());
      const std::vector<std::int64_t> expected = drop ? std::vector<std::int64_t>{300, 300, 300}
                                                      : std::vector<std::int64_t>{300, 300, 300, 100};
      QVERIFY(sizes == expected);
      QCOMPARE(loader.batchesPerEpoch(), static_cast<std::int64_t>(expected.size()));
    }
  }

  void deterministicAcrossLoadersAndWorkers() {
    auto collect = [](int workers, std::uint64_t seed, std::int64_t epoch) {
      LoaderOptions o = LoaderOptions::builder().batchSize(50).numWorkers(workers).seed(seed)
                            .loadingMode(LoadingMode::Streaming).build();
      Loader loader(numbered(), o);
      std::vector<at::Tensor> out;
      for (const Batch& b : loader.epoch(epoch)) out.push_back(b["y"].clone());
      return at::cat(out);
    };
    at::Tensor a = collect(0, 9, 2);
    QVERIFY(at::equal(a, collect(3, 9, 2)));   // workers do not change the order
    QVERIFY(!at::equal(a, collect(3, 9, 3)));  // epochs do
    QVERIFY(!at::equal(a, collect(3, 10, 2))); // seeds do
  }

  void batchesDoNotAliasUnlessReuseIsAsked() {
    LoaderOptions o = LoaderOptions::builder().batchSize(100).numWorkers(2).prefetch(2).build();
    Loader loader(numbered(), o);
    std::vector<Batch> kept;
    for (const Batch& b : loader.epoch(0)) kept.push_back(b);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      QVERIFY(at::equal(kept[i]["y"], kept[i].indices));  // still intact after later batches
      for (std::size_t j = 0; j < i; ++j) QVERIFY(kept[i]["x"].data_ptr() != kept[j]["x"].data_ptr());
    }
    kept.clear();
    // Steady state recycles blocks instead of allocating.
    const auto allocations = loader.poolAllocations();
    for (int e = 1; e < 5; ++e)
      for (const Batch& b : loader.epoch(e)) (void)b;
    QCOMPARE(loader.poolAllocations(), allocations);

    LoaderOptions r = LoaderOptions::builder().batchSize(100).numWorkers(0).reuseBuffers(true).build();
    Loader reusing(numbered(), r);
    Epoch epoch = reusing.epoch(0);
    auto first = epoch.next();
    const void* firstPtr = (*first)["x"].data_ptr();
    auto second = epoch.next();
    QCOMPARE((*second)["x"].data_ptr(), firstPtr);  // the buffer came back at next()
  }

  // epochOver serves a given order (what is left of an interrupted epoch) in batches; waitReady
  // waits in slices (how the Python binding stays responsive to Ctrl-C) and is then true.
  void epochOverServesTheGivenOrder() {
    const LoaderOptions o = LoaderOptions::builder().batchSize(4).numWorkers(2).dropLast(false).build();
    Loader loader(numbered(), o);
    const std::vector<std::int64_t> rest = {9, 3, 7, 1, 0, 5};
    Epoch epoch = loader.epochOver(2, rest);
    std::vector<std::int64_t> got;
    for (;;) {
      int slices = 0;
      while (!epoch.waitReady(std::chrono::milliseconds(1))) QVERIFY(++slices < 5000);
      auto b = epoch.next();
      if (!b) break;
      QCOMPARE(b->epoch, std::int64_t{2});
      QVERIFY(at::equal((*b)["y"], b->indices));
      for (std::int64_t i = 0; i < b->size(); ++i) got.push_back(b->indices[i].item<std::int64_t>());
    }
    QCOMPARE(got, rest);
    QVERIFY(epoch.waitReady(std::chrono::milliseconds(0)));  // over: next() would not wait
    QCOMPARE(loader.lastEpoch().batches, std::int64_t{2});
    const QString e = test::expectBadInput([&] { loader.epochOver(3, {1, 1000}); }, {"sample 1000", "out of range"});
    QVERIFY2(e.isEmpty(), qPrintable(e));
  }

  // A large resident dataset's next order is drawn while an epoch runs on a device: epoch after
  // epoch, a skipped epoch, a retune between epochs and a loader without workers still serve
  // exactly the sampler's order for the epoch asked.
  void nextOrderDrawnAheadIsTheSamplersOrder() {
    const std::int64_t n = 40000;  // above the draw-ahead threshold
    for (const int workers : {0, 2}) {
      const LoaderOptions o = LoaderOptions::builder().batchSize(4096).numWorkers(workers).shuffle(true).seed(7)
                                  .dropLast(false).loadingMode(LoadingMode::Resident).build();
      Loader loader(numbered(n), o, DeviceSpec::parse("sim:0"));
      auto orderOf = [&](std::int64_t e) {
        std::vector<std::int64_t> got;
        for (const Batch& b : loader.epoch(e)) {
          const auto* idx = b.indices.data_ptr<std::int64_t>();
          got.insert(got.end(), idx, idx + b.size());
        }
        return got;
      };
      for (const std::int64_t e : {0, 1, 2, 5, 6}) {  // 1, 2 and 6 drawn ahead; 5 not (3 was)
        if (e == 6) {
          LoaderOptions retuned = o;
          retuned.prefetch = o.prefetch + 1;  // a batch-boundary knob: the order drawn ahead is dropped
          loader.retune(retuned);
        }
        QCOMPARE(orderOf(e), epochIndicesFor(loader.dataset(), o, e));
      }
    }
  }

  // Epoch::queueNext: workers run on into the next epoch before this one ends; the next epoch's
  // start over the same order serves those batches (each sample read once, with its own epoch
  // for transforms); any other start, or the loader's end, drops them.
  void nextEpochIsMadeBeforeTheBoundary() {
    auto ds = std::make_shared<EpochCountingDataset>(40);
    // A timeout keeps the consumer from helping: only the workers make batches.
    const LoaderOptions o = LoaderOptions::builder().batchSize(4).numWorkers(2).prefetch(4).timeout(60)
                                .loadingMode(LoadingMode::Streaming).build();
    std::vector<std::int64_t> order0(40), order1(40);
    std::iota(order0.begin(), order0.end(), 0);
    std::iota(order1.rbegin(), order1.rend(), 0);
    Loader loader(ds, o);
    Epoch e0 = loader.epochOver(0, order0);
    QVERIFY(e0.queueNext(1, order1));
    QVERIFY(!e0.queueNext(2, order0));  // one at a time
    const QString bad = test::expectBadInput([&] { e0.queueNext(2, {1, 1000}); }, {"sample 1000", "out of range"});
    QVERIFY2(bad.isEmpty(), qPrintable(bad));
    QCOMPARE(drain(e0, 0), order0);
    QCOMPARE(loader.lastEpoch().epoch, std::int64_t{0});
    QCOMPARE(loader.lastEpoch().batches, std::int64_t{10});
    QVERIFY(loader.lastEpoch().completed);
    // Epoch 1 has not started, yet its first batches are being made (up to the ring's depth).
    const std::int64_t ahead = std::min<std::int64_t>(40, 4 * loader.prefetchDepth());
    for (int i = 0; i < 500 && ds->readsOf(1) < ahead; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    QCOMPARE(ds->readsOf(1), ahead);
    Epoch e1 = loader.epochOver(1, order1);
    // Its first batch is there already, or is being put in its slot (its samples were read before
    // the epoch began; under ASan the slot can come a little after the reads counted above).
    QVERIFY(e1.waitReady(std::chrono::seconds(5)));
    QVERIFY(!e0.next());                                  // the old epoch stays over
    QVERIFY(e1.queueNext(2, order0));                     // and so on, epoch after epoch
    QCOMPARE(drain(e1, 1), order1);
    QCOMPARE(ds->readsOf(1), std::int64_t{40});  // each sample once: the batches made early were served
    QCOMPARE(loader.lastEpoch().epoch, std::int64_t{1});
    QCOMPARE(loader.lastEpoch().batches, std::int64_t{10});
    e0.stop();  // adopted: stopping the old epoch leaves the new one alone
    for (int i = 0; i < 500 && ds->readsOf(2) < ahead; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    QCOMPARE(ds->readsOf(2), ahead);

    // Another epoch than the queued one: the queued batches are dropped, the asked order served.
    Epoch e2 = loader.epochOver(2, order0);
    QVERIFY(e2.waitReady(std::chrono::seconds(5)));
    QVERIFY(e2.queueNext(3, order1));
    QCOMPARE(drain(e2, 2), order0);
    QCOMPARE(ds->readsOf(2), std::int64_t{40});
    Epoch e5 = loader.epochOver(5, order0);
    QCOMPARE(drain(e5, 5), order0);
    // The same epoch over another order is another epoch too.
    Epoch e6 = loader.epochOver(6, order0);
    QVERIFY(e6.queueNext(7, order1));
    QCOMPARE(drain(e6, 6), order0);
    Epoch e7 = loader.epochOver(7, order0);
    QCOMPARE(drain(e7, 7), order0);

    // Pending when the loader ends (the epoch gone before it, or after it): no hang, no leak.
    {
      Loader l(ds, o);
      Epoch a = l.epochOver(0, order0);
      QVERIFY(a.queueNext(1, order1));
      QCOMPARE(drain(a, 0), order0);
    }
    std::optional<Epoch> outlives;
    {
      Loader l(ds, o);
      outlives.emplace(l.epochOver(0, order0));
      QVERIFY(outlives->queueNext(1, order1));
      QCOMPARE(drain(*outlives, 0), order0);
    }
    QVERIFY(!outlives->next());
    outlives.reset();

    // Loader::epoch(e, NextEpoch) does it by itself with persistent_workers: the sampler's next
    // order is drawn while an epoch runs and queued; without persistent workers the workers stop
    // at each end.
    for (const bool persistent : {true, false}) {
      auto counted = std::make_shared<EpochCountingDataset>(40);
      LoaderOptions shuffled = o;
      shuffled.shuffle = true;
      shuffled.persistent_workers = persistent;
      Loader l(counted, shuffled);
      for (std::int64_t e = 0; e < 3; ++e) {
        if (e > 0 && persistent) {
          for (int i = 0; i < 500 && counted->readsOf(e) < ahead; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          QCOMPARE(counted->readsOf(e), ahead);
        }
        Epoch epoch = l.epoch(e, Loader::Lookahead::NextEpoch);
        QCOMPARE(drain(epoch, e), epochIndicesFor(*counted, shuffled, e));
        QCOMPARE(counted->readsOf(e), std::int64_t{40});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      QCOMPARE(counted->readsOf(3), persistent ? ahead : 0);
    }

    // Without workers there is no one to make it ahead: nothing is queued.
    Loader inline0(ds, LoaderOptions::builder().batchSize(4).numWorkers(0).loadingMode(LoadingMode::Streaming).build());
    Epoch z = inline0.epochOver(0, order0);
    QVERIFY(!z.queueNext(1, order1));
  }

  void batchFieldsByName() {
    Loader loader(numbered(), LoaderOptions::builder().batchSize(10).build());
    Epoch epoch = loader.epoch(0);
    auto b = epoch.next();
    QCOMPARE((*b)["x"].sizes().vec(), (std::vector<std::int64_t>{10, 4}));
    QCOMPARE((*b)["y"].scalar_type(), at::kLong);
    const std::string msg = errorOf([&] { (*b)["images"]; });
    QVERIFY2(msg.find("images") != std::string::npos && msg.find("fields: x, y") != std::string::npos, msg.c_str());
  }

  // A float32 field the dataset also holds as its u8 bytes (Fashion-MNIST's pixels): resident on
  // the host, batches are gathered from the bytes and divided as they are copied, giving the float
  // field's values bit for bit. The decoy's float field is zeros, so batches equal to bytes / 255
  // can only have come from the bytes; streaming, fetch() and the workers read them too.
  void scaledFieldsAreGatheredFromTheirBytes() {
    const std::int64_t n = 1000;
    at::Tensor bytes = at::randint(0, 256, {n, 1, 4, 4}, at::TensorOptions().dtype(at::kByte));
    bytes[7].fill_(255);
    bytes[8].fill_(0);
    const at::Tensor values = bytes.to(at::kFloat).div(255.0f);
    const at::Tensor labels = at::arange(n, at::kLong);
    auto decoy = std::make_shared<TensorDataset>("decoy", std::vector<std::string>{"images", "labels"},
                                                 std::vector<at::Tensor>{at::zeros({n, 1, 4, 4}), labels},
                                                 std::vector<std::optional<ScaledBytes>>{ScaledBytes{bytes, 255.0f}, std::nullopt});
    for (LoadingMode mode : {LoadingMode::Resident, LoadingMode::Streaming})
      for (int workers : {0, 2}) {
        LoaderOptions o = LoaderOptions::builder().batchSize(64).shuffle(true).loadingMode(mode).numWorkers(workers).build();
        Loader loader(decoy, o);
        QCOMPARE(loader.mode(), mode);
        const std::vector<std::string> notes = loader.notes();
        const bool noted = std::any_of(notes.begin(), notes.end(), [](const std::string& t) {
          return t.find("images gathered from the dataset's u8 bytes, divided by 255") != std::string::npos;
        });
        QCOMPARE(noted, mode == LoadingMode::Resident);
        std::int64_t samples = 0;
        for (const Batch& b : loader.epoch(1)) {
          QVERIFY(at::equal(b["images"], values.index_select(0, b.indices)));
          QVERIFY(at::equal(b["labels"], b.indices));
          samples += b.size();
        }
        QCOMPARE(samples, n - n % 64);
        const Batch one = loader.fetch({7, 8, 3});
        QVERIFY(at::equal(one["images"], values.index_select(0, at::tensor({7, 8, 3}, at::kLong))));
        QCOMPARE(one["images"][0].max().item<float>(), 1.0f);
      }
    // Bytes that are not the field's: refused, naming the field and both shapes.
    NAMED(test::expectBadInput(
        [&] {
          TensorDataset("bad", {"images"}, {values}, {ScaledBytes{bytes.view({n, 16}), 255.0f}});
        },
        {"images", "u8 of the float32 field's shape [1000, 1, 4, 4]", "[1000, 16]"}));
    NAMED(test::expectBadInput([&] { TensorDataset("bad", {"labels"}, {labels}, {ScaledBytes{bytes, 255.0f}}); },
                               {"labels", "scaled bytes must be u8"}));
  }

  // Fashion-MNIST keeps its pixels as the file's bytes: resident batches from them are the
  // float32 images (ToTensor's x / 255) bit for bit.
  void fashionMnistBatchesComeFromItsBytes() {
    if (!QFile::exists(QString(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte.gz"))
      QFAIL("dataset-fashion-mnist is not installed (bash packaging/stoker.sh test installs it)");
    auto ds = openDataset("fashion-mnist");
    const auto scaled = ds->scaledFields();
    QCOMPARE(scaled.size(), std::size_t{2});
    QVERIFY(scaled[0] && !scaled[1]);
    QCOMPARE(scaled[0]->bytes.scalar_type(), at::kByte);
    QVERIFY(at::equal(scaled[0]->bytes.to(at::kFloat).div(255.0f), ds->hostFields()[0]));
    Loader loader(ds, LoaderOptions::builder().batchSize(256).shuffle(true).loadingMode(LoadingMode::Resident).build());
    Epoch epoch = loader.epoch(0);
    for (int i = 0; i < 3; ++i) {
      const auto b = epoch.next();
      QVERIFY(b);
      QVERIFY(at::equal((*b)["images"], ds->hostFields()[0].index_select(0, b->indices)));
    }
  }

  void modeChoiceOnSimulatedDevices() {
    auto ds = numbered(20000);  // 20000 * 24 bytes = 480 KB
    LoaderOptions o = LoaderOptions::builder().batchSize(256).build();
    SimDeviceConfig roomy;
    roomy.capacityBytes = 64 << 20;
    Loader fits(ds, o, DeviceSpec::parse("sim:0"), roomy);
    QCOMPARE(fits.mode(), LoadingMode::Resident);
    QVERIFY(fits.memory().allocated >= ds->totalBytes());  // the dataset is charged to the device

    SimDeviceConfig small;
    small.capacityBytes = 400 << 10;  // less than the dataset
    Loader streams(ds, o, DeviceSpec::parse("sim:1"), small);
    QCOMPARE(streams.mode(), LoadingMode::Streaming);
    QVERIFY(streams.notes().front().find("auto: streaming") != std::string::npos);
    QCOMPARE(checkEpoch(streams, 0, o, 20000), QString());
  }

  void outOfMemoryFallsBackToStreaming() {
    auto ds = numbered(20000);
    SimDeviceConfig fragmented;
    fragmented.capacityBytes = 64 << 20;
    fragmented.largestBlockBytes = 300 << 10;  // the probe sees room; one big allocation fails
    LoaderOptions o = LoaderOptions::builder().batchSize(256).build();
    Loader loader(ds, o, DeviceSpec::parse("sim:0"), fragmented);
    QCOMPARE(loader.mode(), LoadingMode::Streaming);
    bool noted = false;
    for (const auto& n : loader.notes()) noted |= n.find("fell back to streaming") != std::string::npos;
    QVERIFY(noted);
    QCOMPARE(checkEpoch(loader, 0, o, 20000), QString());
    QCOMPARE(loader.memory().allocated, 0);  // nothing of the failed resident load is left

    // Asked for resident explicitly, the error says so instead of falling back.
    ErrorKind kind{};
    LoaderOptions resident = o;
    resident.loading_mode = LoadingMode::Resident;
    const std::string msg = errorOf([&] { Loader l(ds, resident, DeviceSpec::parse("sim:0"), fragmented); }, &kind);
    QCOMPARE(kind, ErrorKind::OutOfMemory);
    QVERIFY2(msg.find("loading_mode resident") != std::string::npos && msg.find("out of memory") != std::string::npos,
             msg.c_str());
  }

  void prefetchDepthFollowsHeadroom() {
    auto ds = numbered(4000);
    LoaderOptions o = LoaderOptions::builder().batchSize(1000).numWorkers(1).prefetch(8).loadingMode(LoadingMode::Streaming)
                          .vramMaxUsage(0.5).build();
    const std::int64_t block = 1000 * 32 + 1000 * 8;  // x and y rows of one batch, 256-aligned sizes
    SimDeviceConfig cfg;
    cfg.capacityBytes = 2 * 12 * block;  // half of it (vram_max_usage) holds 12 batches
    auto device = std::make_shared<SimDevice>(0, cfg);
    Loader loader(ds, o, device);
    for (const Batch& b : loader.epoch(0)) (void)b;
    QCOMPARE(loader.prefetchDepth(), 8);  // plenty of headroom: the requested maximum
    device->setOtherUse(cfg.capacityBytes / 2 - 5 * block);  // another tenant takes most of the budget
    for (const Batch& b : loader.epoch(1)) (void)b;
    const int squeezed = loader.prefetchDepth();
    QVERIFY2(squeezed >= 1 && squeezed < 8, qPrintable(QString::number(squeezed)));
    QCOMPARE(loader.lastEpoch().depth, squeezed);
    device->setOtherUse(0);
    for (const Batch& b : loader.epoch(2)) (void)b;
    QCOMPARE(loader.prefetchDepth(), 8);
    o.auto_tune = false;
    o.prefetch = 3;
    Loader fixed(ds, o, device);
    device->setOtherUse(cfg.capacityBytes / 2);
    for (const Batch& b : fixed.epoch(0)) (void)b;
    QCOMPARE(fixed.prefetchDepth(), 3);
  }

  void streamingCopiesThroughTheDevice() {
    auto ds = numbered(1000);
    auto device = std::make_shared<SimDevice>(0, SimDeviceConfig{});
    for (bool nonBlocking : {true, false}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(100).loadingMode(LoadingMode::Streaming).nonBlocking(nonBlocking).build();
      const auto before = device->bytesCopied();
      Loader loader(ds, o, device);
      QCOMPARE(checkEpoch(loader, 0, o, 1000), QString());
      QCOMPARE(device->bytesCopied() - before, ds->totalBytes());
    }
  }

  void cancelStopsTheEpoch() {
    auto ds = parseSyntheticSpec("synthetic:2000,16,f32,200");
    LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(2).loadingMode(LoadingMode::Streaming).build();
    Loader loader(ds, o);
    CancelToken token;
    loader.setCancelToken(&token);
    ErrorKind kind{};
    const std::string msg = errorOf(
        [&] {
          int n = 0;
          for (const Batch& b : loader.epoch(0)) {
            (void)b;
            if (++n == 3) token.cancel();
          }
        },
        &kind);
    QCOMPARE(kind, ErrorKind::Cancelled);
    QVERIFY(!loader.lastEpoch().completed);
    QVERIFY(loader.lastEpoch().batches < 10);
  }

  // A cancel from another thread (a multi-device session's stopAll, the auto-tuner ending a trial,
  // SIGINT) while the consumer is producing a batch itself: Error(Cancelled), not the worker-only
  // EpochStopped escaping next() (the workbench's job thread terminated the process on it).
  void cancelFromAnotherThreadWhileTheConsumerProduces() {
    auto ds = parseSyntheticSpec("synthetic:200,16,f32,0,30000");  // 30 ms a sample
    for (int workers : {0, 1}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(workers).loadingMode(LoadingMode::Streaming).build();
      Loader loader(ds, o);
      CancelToken token;
      loader.setCancelToken(&token);
      std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        token.cancel();
      });
      ErrorKind kind{};
      std::string msg;
      try {
        msg = errorOf([&] { for (const Batch& b : loader.epoch(0)) (void)b; }, &kind);
      } catch (...) {
        msg = "an exception that is not stoker::Error";
      }
      canceller.join();
      QVERIFY2(kind == ErrorKind::Cancelled, (std::to_string(workers) + " workers: " + msg).c_str());
    }
  }

  // A Loader destroyed while its epoch (with the next epoch drawn ahead) still runs: at the epoch's
  // end its look-ahead is stopped, not handed to a Loader that is gone (that kept the core, the
  // dataset and the parked workers alive for good).
  void destroyingTheLoaderBeforeItsEpochEndsFreesTheCore() {
    std::shared_ptr<Dataset> ds = parseSyntheticSpec("synthetic:200,4");
    const std::weak_ptr<Dataset> weak = ds;
    {
      LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(2).loadingMode(LoadingMode::Streaming).build();
      auto loader = std::make_unique<Loader>(ds, o);
      Epoch epoch = loader->epoch(0, Loader::Lookahead::NextEpoch);
      loader.reset();
      int batches = 0;
      while (epoch.next()) ++batches;
      QCOMPARE(batches, 20);
    }
    ds.reset();
    QVERIFY(weak.expired());
  }

  void droppingAnEpochMidwayIsClean() {
    LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(2).loadingMode(LoadingMode::Streaming).build();
    Loader loader(numbered(), o);
    {
      Epoch e = loader.epoch(0);
      e.next();
      e.next();
      // Another epoch while this one runs is refused.
      const std::string msg = errorOf([&] { loader.epoch(1); });
      QVERIFY2(msg.find("still being iterated") != std::string::npos, msg.c_str());
    }
    QCOMPARE(loader.lastEpoch().batches, 2);
    QVERIFY(!loader.lastEpoch().completed);
    QCOMPARE(checkEpoch(loader, 1, o, 1000), QString());
  }

  void workerErrorNamesTheSample() {
    for (int workers : {0, 2}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(workers).shuffle(false)
                            .loadingMode(LoadingMode::Streaming).build();
      Loader loader(std::make_shared<FaultyDataset>(77, 0), o);
      std::int64_t delivered = 0;
      const std::string msg = errorOf([&] {
        for (const Batch& b : loader.epoch(0)) delivered += b.size();
      });
      QVERIFY2(msg.find("sample 77") != std::string::npos && msg.find("corrupt record") != std::string::npos &&
                   msg.find("batch 4") != std::string::npos,
               msg.c_str());
      QCOMPARE(delivered, 64);  // the batches before the bad one arrived in order
    }
  }

  void timeoutNamesTheStalledStage() {
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(2).shuffle(false).timeout(0.3)
                          .loadingMode(LoadingMode::Streaming).build();
    Loader loader(std::make_shared<FaultyDataset>(40, 3000), o);
    ErrorKind kind{};
    QElapsedTimer timer;
    timer.start();
    const std::string msg = errorOf([&] {
      for (const Batch& b : loader.epoch(0)) (void)b;
    }, &kind);
    QCOMPARE(kind, ErrorKind::Timeout);
    QVERIFY2(msg.find("batch 2") != std::string::npos && msg.find("reading samples") != std::string::npos &&
                 msg.find("sample 40") != std::string::npos && msg.find("timeout 0.3") != std::string::npos,
             msg.c_str());
  }

  // The debug_mode preset sets num_workers=0 with a 60 s timeout; before, the timeout was only
  // watched by a consumer waiting for workers, so with no workers it could never fire.
  void timeoutFiresWithoutWorkers() {
    LoaderOptions o = debugMode();
    o.batch_size = 16;
    o.timeout = 0.3;
    o.loading_mode = LoadingMode::Streaming;
    Loader loader(std::make_shared<FaultyDataset>(40, 1000), o);
    ErrorKind kind{};
    std::int64_t delivered = 0;
    const std::string msg = errorOf([&] {
      for (const Batch& b : loader.epoch(0)) delivered += b.size();
    }, &kind);
    QCOMPARE(kind, ErrorKind::Timeout);
    QVERIFY2(msg.find("batch 2") != std::string::npos && msg.find("reading samples") != std::string::npos &&
                 msg.find("consumer's thread") != std::string::npos && msg.find("sample 40") != std::string::npos &&
                 msg.find("timeout 0.3") != std::string::npos,
             msg.c_str());
    QCOMPARE(delivered, 32);  // the batches before the slow one arrived
    // Without the slow sample the same options run the whole epoch.
    Loader fine(std::make_shared<FaultyDataset>(-1, 1000), o);
    std::int64_t all = 0;
    for (const Batch& b : fine.epoch(0)) all += b.size();
    QCOMPARE(all, 500);  // debug_mode keeps the last, partial batch
  }

  // The progress total counted every batch as full: with drop_last=false the bar ended short.
  void sessionProgressTotalIsWhatItHandsOut() {
    struct Last : ProgressSink {
      ProgressUpdate last;
      std::mutex m;
      void progress(const ProgressUpdate& u) override {
        std::lock_guard<std::mutex> lock(m);
        last = u;
      }
    };
    for (bool dropLast : {false, true}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(1).dropLast(dropLast).build();
      auto ds = std::make_shared<FaultyDataset>(-1, 0);  // 500 samples of 8 bytes
      LoaderSessionOptions so;
      so.epochs = 2;
      LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
      const std::uint64_t expected = (dropLast ? 496 : 500) * 8 * 2;
      QCOMPARE(session.totalBytes(), expected);
      Last sink;
      session.run(&sink, nullptr);
      QVERIFY(sink.last.finished);
      QCOMPARE(sink.last.done, expected);
      QCOMPARE(sink.last.total, expected);
    }
  }

  // A run (stoker bench, the workbench's Run) drained the ring at every epoch's end: the workers
  // now make the next epoch's first batches while the last ones are consumed, as a training loop's
  // persistent workers do, and each sample is still read once per epoch.
  void sessionMakesTheNextEpochAhead() {
    struct AtLastBatch : ProgressSink {
      std::shared_ptr<EpochCountingDataset> ds;
      std::uint64_t epochBytes = 0;
      std::int64_t nextReads = -1;  // epoch 1's reads when epoch 0's last batch was handed out
      void progress(const ProgressUpdate& u) override {
        if (u.done == epochBytes) nextReads = ds->readsOf(1);
      }
    };
    const LoaderOptions o = LoaderOptions::builder().batchSize(4).numWorkers(2).prefetch(4)
                                .loadingMode(LoadingMode::Streaming).build();
    for (const std::int64_t epochs : {2, 1}) {
      auto ds = std::make_shared<EpochCountingDataset>(40);
      LoaderSessionOptions so;
      so.epochs = epochs;
      so.stepMicros = 60000;  // a slow step (more than the meter's 50 ms): every batch is reported
      LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
      AtLastBatch sink;
      sink.ds = ds;
      sink.epochBytes = 40 * 8;
      const LoaderSessionResult r = session.run(&sink, nullptr);
      QCOMPARE(r.devices.at(0).epochs.size(), std::size_t(epochs));
      for (const auto& e : r.devices[0].epochs) QCOMPARE(e.batches, std::int64_t{10});
      QCOMPARE(ds->readsOf(0), std::int64_t{40});
      if (epochs == 2) {
        QVERIFY2(sink.nextReads >= 4, qPrintable(QString("epoch 1 had read %1 samples").arg(sink.nextReads)));
        QCOMPARE(ds->readsOf(1), std::int64_t{40});  // the batches made early were served
      } else {
        QCOMPARE(ds->readsOf(1), std::int64_t{0});  // the last epoch queues nothing
      }
    }
  }

  // An epoch with no batch (fewer samples than one batch, drop_last) is an error that says so:
  // an until-stopped run used to repeat empty epochs without ever looking at Stop.
  void anEpochWithoutABatchIsNamed() {
    LoaderOptions o = LoaderOptions::builder().batchSize(1000).numWorkers(1).dropLast(true).build();
    auto ds = std::make_shared<FaultyDataset>(-1, 0);  // 500 samples
    for (std::int64_t epochs : {2, 0}) {
      LoaderSessionOptions so;
      so.epochs = epochs;
      LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
      const std::string msg = errorOf([&] { session.run(nullptr, nullptr); });
      QVERIFY2(msg.find("served no batch: 500 samples make no whole batch of 1000 (drop_last)") != std::string::npos, msg.c_str());
    }
  }

  // Several devices used to force the distributed sampler silently, dropping weighted and
  // with-replacement sampling and overwriting shard_rank/shard_world_size. They are refused
  // naming the knob; sequential stays in order on every shard.
  void severalDevicesRefuseWhatTheyCannotSplit() {
    auto ds = std::make_shared<FaultyDataset>(-1, 0);
    const std::vector<DeviceSpec> two{DeviceSpec::parse("sim:0"), DeviceSpec::parse("sim:1")};
    LoaderSessionOptions so;
    so.epochs = 1;
    LoaderOptions weighted = LoaderOptions::builder().sampler(SamplerType::Weighted).weights(std::vector<double>(500, 1.0)).build();
    LoaderOptions replacement = LoaderOptions::builder().sampler(SamplerType::RandomWithReplacement).build();
    LoaderOptions shard = LoaderOptions::builder().sampler(SamplerType::Distributed).shard(1, 4).build();
    const std::pair<LoaderOptions, const char*> refused[] = {
        {weighted, "sampler_type: weighted sampling cannot be split across 2 devices"},
        {replacement, "sampler_type: random_with_replacement sampling cannot be split across 2 devices"},
        {shard, "shard_world_size: with 2 devices each device is one shard"}};
    for (const auto& [options, expected] : refused) {
      const LoaderOptions& o = options;  // a lambda may not capture a structured binding (C++17)
      const std::string msg = errorOf([&] { LoaderSession(ds, o, two, so); });
      QVERIFY2(msg.find(expected) != std::string::npos, msg.c_str());
      LoaderSession one(ds, o, {DeviceSpec::parse("sim:0")}, so);  // one device keeps them
      QVERIFY(one.run(nullptr, nullptr).samplesPerS > 0);
    }
    // Sequential over two devices: each shard in order (rank r takes r, r + 2, ...).
    struct ReadOrder : Dataset {
      std::vector<FieldSpec> specs{FieldSpec{"v", c10::ScalarType::Long, {}, 8}};
      mutable std::mutex m;
      mutable std::vector<std::int64_t> read;
      std::string description() const override { return "read order"; }
      std::int64_t size() const override { return 500; }
      const std::vector<FieldSpec>& fields() const override { return specs; }
      void readItem(std::int64_t index, std::uint8_t* const* dst) const override {
        std::lock_guard<std::mutex> lock(m);
        read.push_back(index);
        std::memcpy(dst[0], &index, 8);
      }
    };
    auto order = std::make_shared<ReadOrder>();
    LoaderOptions seq = LoaderOptions::builder().sampler(SamplerType::Sequential).batchSize(10).numWorkers(0)
                            .loadingMode(LoadingMode::Streaming).build();
    QVERIFY(seq.shuffle);  // the default: the sequential sampler must win over it on every shard
    LoaderSession split(order, seq, two, so);
    const LoaderSessionResult r = split.run(nullptr, nullptr);
    QCOMPARE(r.devices.size(), std::size_t(2));
    QCOMPARE(r.devices[0].epochs.at(0).samples + r.devices[1].epochs.at(0).samples, std::int64_t(500));
    std::vector<std::int64_t> perRank[2];
    for (std::int64_t i : order->read) perRank[i % 2].push_back(i);
    for (int rank = 0; rank < 2; ++rank) {
      QCOMPARE(perRank[rank].size(), std::size_t(250));
      for (std::size_t k = 0; k < perRank[rank].size(); ++k)
        QCOMPARE(perRank[rank][k], static_cast<std::int64_t>(2 * k) + rank);
    }
  }

  // A sweep over a dataset-level knob measured the first point's dataset on every row: the
  // dataset was opened once, before the sweep. It is opened again when such a knob changes.
  void sweepReopensTheDatasetForDatasetKnobs() {
    std::vector<ReaderMode> opened;
    auto open = [&opened](const LoaderOptions& o) {
      opened.push_back(o.reader_mode);
      return std::static_pointer_cast<Dataset>(std::make_shared<FaultyDataset>(-1, 0));
    };
    LoaderSessionOptions so;
    so.epochs = 1;
    const LoaderOptions base = LoaderOptions::builder().batchSize(50).build();
    MeasureSpec quick;
    quick.warmupSeconds = 0.05;
    quick.minSeconds = 0.05;
    quick.maxSeconds = 0.2;
    SweepResult r = runSweep(open, base, {parseSweepAxis("reader_mode", "mmap,read"), parseSweepAxis("num_workers", "0,1")},
                             {DeviceSpec::parse("cpu")}, so, quick, nullptr, nullptr);
    QCOMPARE(r.points.size(), std::size_t(4));
    QCOMPARE(r.datasetOpens, 2);  // (mmap, 0) (mmap, 1) | (read, 0) (read, 1)
    QCOMPARE(opened, (std::vector<ReaderMode>{ReaderMode::Mmap, ReaderMode::Read}));
    QCOMPARE(r.points[2].reopened, true);
    QCOMPARE(r.points[1].reopened || r.points[3].reopened, false);
    for (const auto& p : r.points) QVERIFY2(p.error.empty() && p.samplesPerS > 0, p.error.c_str());
    // Loader-level knobs only: one open for the whole sweep.
    opened.clear();
    r = runSweep(open, base, {parseSweepAxis("num_workers", "0,1,2")}, {DeviceSpec::parse("cpu")}, so, quick, nullptr, nullptr);
    QCOMPARE(r.datasetOpens, 1);
    for (const auto& [knob, values] : {std::pair{"part_size", "1048576,4194304"}, std::pair{"max_inflight_parts", "1,4"}}) {
      r = runSweep(open, base, {parseSweepAxis(knob, values)}, {DeviceSpec::parse("cpu")}, so, quick, nullptr, nullptr);
      QCOMPARE(r.datasetOpens, 2);
    }
  }

  // Live tuning: a batch-boundary knob changed mid-epoch takes effect at the next batch and the
  // epoch goes on with the same samples in the same order -- none repeated, none skipped.
  void retuneMidEpochKeepsTheOrder() {
    auto ds = std::make_shared<HookedDataset>(300);
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(0).seed(4).dropLast(false)
                          .loadingMode(LoadingMode::Streaming).build();
    std::vector<RetuneApplied> applied;
    LoaderSessionOptions so;
    so.epochs = 2;
    so.onRetuned = [&applied](const RetuneApplied& a) { applied.push_back(a); };
    LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
    LoaderOptions next = o;
    next.timeout = 5;
    next.prefetch = 2;
    ds->onRead = [&](std::size_t count) {
      if (count == 100) session.retune(next);  // from the consumer's own thread, mid-batch
    };
    const LoaderSessionResult r = session.run(nullptr, nullptr);
    QCOMPARE(applied.size(), std::size_t(1));
    QCOMPARE(applied[0].atEpochEnd, false);
    QCOMPARE(QString::fromStdString(applied[0].change), QString("prefetch 4 \u2192 2, timeout 0.0 \u2192 5.0"));
    QVERIFY(applied[0].time > 1e9);
    std::vector<std::int64_t> expected = epochIndices(o, 300, 0), second = epochIndices(o, 300, 1);
    expected.insert(expected.end(), second.begin(), second.end());
    QCOMPARE(ds->read, expected);  // num_workers 0: what was read is what was served, in order
    QCOMPARE(r.devices[0].epochs.size(), std::size_t(2));  // since the change: the rest of epoch 0, epoch 1
    QCOMPARE(r.devices[0].epochs[0].samples + 112, std::int64_t(300));  // 7 batches of 16 came before it
    QVERIFY(r.devices[0].notes.back().find("retuned: prefetch 4") != std::string::npos);
  }

  // The same with skip_bad_samples and bad samples before the retune: the rest starts after the
  // last batch's place in the order, skipped samples counted (counted by the rows served, the last
  // samples before the retune were served again, once for each skipped one).
  void retuneMidEpochAfterSkippedSamplesServesEachOnce() {
    struct WithBad : HookedDataset {
      using HookedDataset::HookedDataset;
      void readItem(std::int64_t index, std::uint8_t* const* dst) const override {
        HookedDataset::readItem(index, dst);
        if (index % 7 == 3) throwBadInput("sample " + std::to_string(index), "a bad sample");
      }
    };
    auto ds = std::make_shared<WithBad>(300);
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(0).seed(4).dropLast(false)
                          .loadingMode(LoadingMode::Streaming).skipBadSamples(true).build();
    LoaderSessionOptions so;
    so.epochs = 1;
    LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
    LoaderOptions next = o;
    next.prefetch = 2;
    ds->onRead = [&](std::size_t count) {
      if (count == 100) session.retune(next);
    };
    session.run(nullptr, nullptr);
    QCOMPARE(ds->read, epochIndices(o, 300, 0));  // every sample read once, in order
  }

  // A dataset's own order (WebDataset's) is drawn once an epoch, also when the epoch is retuned
  // between batches: for a remote WebDataset a second draw of epoch e re-plans its reads as a new
  // start (the samples kept from dropped blocks go, those already read count as still to read).
  // Two retunes in one epoch serve the rest of the order first drawn.
  void retuneMidEpochDrawsTheOwnOrderOnce() {
    struct OwnOrder : HookedDataset {
      using HookedDataset::HookedDataset;
      mutable std::map<std::int64_t, int> draws;  // epoch -> draws of its order
      mutable std::vector<std::vector<std::int64_t>> rests;  // what ownEpochRest was told
      bool hasOwnEpochOrder() const override { return true; }
      void ownEpochRest(std::int64_t epoch, const std::int64_t* indices, std::int64_t count) const override {
        std::lock_guard<std::mutex> lock(m);
        rests.push_back({epoch});
        rests.back().insert(rests.back().end(), indices, indices + count);
      }
      std::optional<std::vector<std::int64_t>> ownEpochOrder(const LoaderOptions&, std::int64_t epoch) const override {
        {
          std::lock_guard<std::mutex> lock(m);
          ++draws[epoch];
        }
        std::vector<std::int64_t> v(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = (i * 7 + epoch) % n;  // 7 is prime to 300
        return v;
      }
    };
    auto ds = std::make_shared<OwnOrder>(300);
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(0).dropLast(false)
                          .loadingMode(LoadingMode::Streaming).build();
    LoaderSessionOptions so;
    so.epochs = 2;
    int retunes = 0;
    so.onRetuned = [&retunes](const RetuneApplied&) { ++retunes; };
    LoaderSession session(ds, o, {DeviceSpec::parse("cpu")}, so);
    LoaderOptions first = o, second = o;
    first.timeout = 5;
    second.timeout = 6;
    ds->onRead = [&](std::size_t count) {
      if (count == 100) session.retune(first);
      if (count == 200) session.retune(second);
    };
    session.run(nullptr, nullptr);
    QCOMPARE(retunes, 2);
    std::vector<std::int64_t> expected = *ds->ownEpochOrder(o, 0), next = *ds->ownEpochOrder(o, 1);
    expected.insert(expected.end(), next.begin(), next.end());
    QCOMPARE(ds->read, expected);
    QCOMPARE(ds->draws[0], 2);  // the run's one draw, and this test's
    QCOMPARE(ds->draws[1], 2);
    // The dataset is told what is left at each retune: after 7 batches of 16, then after 13.
    QCOMPARE(ds->rests.size(), std::size_t(2));
    for (const auto& [rest, served] : {std::pair{ds->rests[0], 112}, std::pair{ds->rests[1], 208}}) {
      QCOMPARE(rest.front(), std::int64_t(0));  // the epoch
      QCOMPARE(std::vector<std::int64_t>(rest.begin() + 1, rest.end()),
               std::vector<std::int64_t>(expected.begin() + served, expected.begin() + 300));
    }
  }

  // Workers can change between two batches; sample-order knobs wait for the epoch's end and get
  // a new loader; dataset-level knobs re-open the dataset (refused without a way to re-open).
  void retuneWorkersBatchSizeAndReader() {
    auto ds = std::make_shared<HookedDataset>(500);
    LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(1).loadingMode(LoadingMode::Streaming).build();
    int reopened = 0;
    std::vector<RetuneApplied> applied;
    LoaderSessionOptions so;
    so.epochs = 3;
    ReaderMode reopenedWith = ReaderMode::Mmap;
    so.reopen = [&](const LoaderOptions& opened) {
      ++reopened;
      reopenedWith = opened.reader_mode;
      return std::static_pointer_cast<Dataset>(std::make_shared<HookedDataset>(500));
    };
    so.onRetuned = [&applied](const RetuneApplied& a) { applied.push_back(a); };
    LoaderSession session(ds, o, {DeviceSpec::parse("sim:0")}, so);
    LoaderOptions workers = o;
    workers.num_workers = 2;
    LoaderOptions bigger = workers;
    bigger.batch_size = 20;
    bigger.reader_mode = ReaderMode::Read;
    ds->onRead = [&](std::size_t count) {  // on worker threads: retune is thread-safe
      if (count == 100) session.retune(workers);
      if (count == 300) session.retune(bigger);
    };
    const LoaderSessionResult r = session.run(nullptr, nullptr);
    QCOMPARE(applied.size(), std::size_t(2));
    QCOMPARE(QString::fromStdString(applied[0].change), QString("num_workers 1 \u2192 2"));
    QVERIFY(!applied[0].atEpochEnd);
    QCOMPARE(QString::fromStdString(applied[1].change), QString("batch_size 10 \u2192 20, reader_mode mmap \u2192 read"));
    QVERIFY(applied[1].atEpochEnd);
    QCOMPARE(reopened, 1);
    QCOMPARE(reopenedWith, ReaderMode::Read);
    QCOMPARE(r.devices[0].epochs.size(), std::size_t(2));  // epochs 1 and 2, with the new loader
    for (const auto& e : r.devices[0].epochs) QCOMPARE(e.batches, std::int64_t(25));  // 500 in batches of 20
    // Refusals name the knob and leave the run as it was.
    LoaderSessionOptions plain;
    plain.epochs = 1;
    LoaderSession fixedDataset(ds, o, {DeviceSpec::parse("cpu")}, plain);
    LoaderOptions read = o;
    read.reader_mode = ReaderMode::Read;
    QVERIFY(errorOf([&] { fixedDataset.retune(read); }).rfind("reader_mode: this run cannot re-open its dataset", 0) == 0);
    LoaderOptions weighted = o;
    weighted.sampler_type = SamplerType::Weighted;
    weighted.weights = {1, 2};
    QVERIFY(errorOf([&] { fixedDataset.retune(weighted); }).rfind("weights: has 2 entries for 500 samples", 0) == 0);
    LoaderOptions negative = o;
    negative.prefetch = -3;
    QVERIFY(errorOf([&] { fixedDataset.retune(negative); }).rfind("prefetch:", 0) == 0);
    QVERIFY(fixedDataset.run(nullptr, nullptr).samplesPerS > 0);
    // A Loader refuses a sample-order knob outright.
    Loader loader(ds, o);
    QVERIFY(errorOf([&] { loader.retune(bigger); }).rfind("batch_size: cannot change on a running loader", 0) == 0);
  }

  // epochs = 0 runs until the caller cancels; Stop then ends it normally with what it measured.
  void untilStoppedEndsOnCancel() {
    auto ds = std::make_shared<FaultyDataset>(-1, 0);
    LoaderOptions o = LoaderOptions::builder().batchSize(10).numWorkers(1).build();
    LoaderSessionOptions so;
    so.epochs = 0;
    so.stepMicros = 50;
    LoaderSession session(ds, o, {DeviceSpec::parse("sim:0"), DeviceSpec::parse("sim:1")}, so);
    QCOMPARE(session.totalBytes(), std::uint64_t(0));
    CancelToken stop;
    std::thread stopper([&stop] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      stop.cancel();
    });
    const LoaderSessionResult r = session.run(nullptr, &stop);
    stopper.join();
    QCOMPARE(r.devices.size(), std::size_t(2));
    QVERIFY(r.devices[0].epochs.size() >= 2);  // 25 batches of 10 per device and epoch: many epochs in 0.3 s
    QVERIFY(r.samplesPerS > 0);
  }

  // Stop while the loaders open: a resident dataset that would decode for minutes stops at once,
  // in the session's constructor and in a rebuild at an epoch's end (until-stopped runs end normally).
  void stopInterruptsAResidentDecode() {
    auto slow = parseSyntheticSpec("synthetic:20000,8,f32,0,1000");  // 10 s of decoding on 2 cores
    const LoaderOptions resident = LoaderOptions::builder().batchSize(32).loadingMode(LoadingMode::Resident).build();
    CancelToken stop;
    LoaderSessionOptions so;
    so.epochs = 0;
    so.openCancel = &stop;
    std::thread stopper([&stop] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      stop.cancel();
    });
    const auto start = std::chrono::steady_clock::now();
    ErrorKind kind{};
    const std::string message = errorOf([&] { LoaderSession(slow, resident, {DeviceSpec::parse("cpu")}, so); }, &kind);
    stopper.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    QCOMPARE(kind, ErrorKind::Cancelled);
    QVERIFY2(seconds < 2, qPrintable(QString::number(seconds)));
    // An epoch-end change to resident rebuilds the loader, decoding 64,000 samples (~3 s): Stop
    // ends that too, and the until-stopped run returns what it measured.
    auto medium = parseSyntheticSpec("synthetic:64000,8,f32,0,100");
    LoaderOptions shortEpochs = LoaderOptions::builder().batchSize(16).loadingMode(LoadingMode::Streaming).build();
    shortEpochs.sampler_type = SamplerType::RandomWithReplacement;
    shortEpochs.num_samples = 64;  // 6 ms epochs
    LoaderOptions toResident = shortEpochs;
    toResident.loading_mode = LoadingMode::Resident;
    so.openCancel = nullptr;
    LoaderSession run(medium, shortEpochs, {DeviceSpec::parse("cpu")}, so);
    CancelToken stopRun;
    std::thread driver([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      run.retune(toResident);
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      stopRun.cancel();
    });
    const auto runStart = std::chrono::steady_clock::now();
    const LoaderSessionResult r = run.run(nullptr, &stopRun);
    driver.join();
    const double runSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart).count();
    QVERIFY2(runSeconds < 2, qPrintable(QString::number(runSeconds)));
    QCOMPARE(r.devices.size(), std::size_t(1));
  }

  // Two settings are "different" only when their 95 % intervals are disjoint.
  void measurementsCompareByTheirIntervals() {
    Measurement a, b;
    a.samplesPerS = 1000;
    a.ciHalfWidth = 30;
    b.samplesPerS = 1050;
    b.ciHalfWidth = 30;
    QVERIFY(!clearlyDifferent(a, b));  // 970-1030 overlaps 1020-1080
    b.samplesPerS = 1070;
    QVERIFY(clearlyDifferent(a, b) && clearlyDifferent(b, a));
    QCOMPARE(a.relativeCi(), 0.03);
    // A real measurement: a warm-up, windows, an interval, and the spread around the median.
    auto ds = parseSyntheticSpec("synthetic:1000000,8,f32,20");
    LoaderOptions o = LoaderOptions::builder().batchSize(32).numWorkers(1).loadingMode(LoadingMode::Streaming).build();
    MeasureSpec spec;
    spec.maxSeconds = 2;
    const Measurement m = measureLoader(ds, o, {DeviceSpec::parse("cpu")}, {}, spec, nullptr);
    QVERIFY2(m.windows >= 3 && m.samplesPerS > 0 && m.ciHalfWidth > 0, qPrintable(QString::number(m.windows)));
    QVERIFY(m.p10 <= m.median && m.median <= m.p90);
    QVERIFY(m.seconds >= spec.minSeconds * 0.9 && m.seconds < spec.maxSeconds + 1);
    QCOMPARE(QString::fromStdString(m.mode), QString("streaming"));
    CancelToken cancelled;
    cancelled.cancel();
    ErrorKind kind{};
    errorOf([&] { measureLoader(ds, o, {DeviceSpec::parse("cpu")}, {}, spec, &cancelled); }, &kind);
    QCOMPARE(kind, ErrorKind::Cancelled);
  }

  // Short epochs: each epoch's end flushes a window of the last batch over microseconds, which the
  // measurement must not take for a rate (it once read 438,000 samples/s on a loader doing 170).
  void shortEpochsMeasureTheirRate() {
    auto ds = parseSyntheticSpec("synthetic:96,8,f32,0,3000");  // 3 ms of waiting per sample: ~330 samples/s on one worker
    LoaderOptions o = LoaderOptions::builder().batchSize(32).numWorkers(1).loadingMode(LoadingMode::Streaming).build();
    MeasureSpec spec;
    spec.warmupSeconds = 0.3;
    spec.minSeconds = 1.5;
    spec.maxSeconds = 1.5;
    // What the Monitor plots: the epoch-end records too.
    struct Rates : TelemetryObserver {
      std::mutex mutex;
      std::vector<std::pair<double, bool>> rates;  // samples/s, epoch end
      void onRecord(const TelemetryRecord& r) override {
        std::lock_guard<std::mutex> lock(mutex);
        rates.emplace_back(r.samples_per_s, r.epoch_end);
      }
    };
    auto seen = std::make_shared<Rates>();
    LoaderSessionOptions session;
    session.observers.push_back(seen);
    const Measurement m = measureLoader(ds, o, {DeviceSpec::parse("cpu")}, session, spec, nullptr);
    QVERIFY2(m.samplesPerS > 100 && m.samplesPerS < 700, qPrintable(QString::number(m.samplesPerS)));
    QVERIFY2(m.p90 < 2000, qPrintable(QString::number(m.p90)));
    // The flush read as millions of samples/s at every epoch's end. A consumer this VM holds up
    // for a moment is something else: the batches made meanwhile are taken in a burst, and a whole
    // 96-sample epoch consumed in 28 ms read 3,424 samples/s once in a fresh-clone CI. So no
    // record may be absurd, and one (or one in ten) may be a burst.
    int ends = 0, bursts = 0;
    for (const auto& [rate, end] : seen->rates) {
      ends += end;
      bursts += rate >= 2000;
      QVERIFY2(rate < 20000, qPrintable(QString("%1 samples/s%2").arg(rate).arg(end ? " at an epoch's end" : "")));
    }
    QVERIFY(ends >= 2);
    QVERIFY2(bursts <= std::max(1, static_cast<int>(seen->rates.size()) / 10),
             qPrintable(QString("%1 of %2 records at 2,000 samples/s or more").arg(bursts).arg(seen->rates.size())));
  }

  // Epochs shorter than a telemetry window (Fashion-MNIST at 1.5 M samples/s: 40 ms) have only
  // their end's record, which covers the whole epoch: it counts, or no trial had a window and
  // every interval read +-100 % (the default `stoker tune` told no two settings apart).
  void epochsShorterThanAWindowAreMeasured() {
    auto ds = parseSyntheticSpec("synthetic:4096,8,f32");
    LoaderOptions o = LoaderOptions::builder().batchSize(256).numWorkers(1).loadingMode(LoadingMode::Streaming).build();
    MeasureSpec spec;
    spec.windowMs = 200;  // well past an epoch here
    spec.warmupSeconds = 0.2;
    spec.minSeconds = 1;
    spec.maxSeconds = 1.5;
    const Measurement m = measureLoader(ds, o, {DeviceSpec::parse("cpu")}, {}, spec, nullptr);
    QVERIFY2(m.windows >= 3, qPrintable(QString::number(m.windows)));
    QVERIFY2(m.samplesPerS > 0 && m.relativeCi() < 0.5, qPrintable(QString("%1 +- %2").arg(m.samplesPerS).arg(m.ciHalfWidth)));
  }

  // Under `auto`, a dataset that advises against resident (images, token windows) streams when
  // the user runs it: the tuner measures it streaming too, not a copy decoded once for it.
  void autoTuneMeasuresThePipelineThatWillRun() {
    struct Streams : Dataset {
      std::vector<FieldSpec> specs{FieldSpec{"v", c10::ScalarType::Long, {}, 8}};
      std::string description() const override { return "streams"; }
      std::int64_t size() const override { return 4096; }
      const std::vector<FieldSpec>& fields() const override { return specs; }
      void readItem(std::int64_t index, std::uint8_t* const* dst) const override { std::memcpy(dst[0], &index, 8); }
      ResidentAdvice residentAdvice() const override { return {true, false, "decoded as read"}; }
    };
    auto ds = std::make_shared<Streams>();
    TuneSpec spec;
    spec.budgetSeconds = 3;
    spec.candidates = {{"num_workers", {"0", "1"}}};
    spec.measure.warmupSeconds = 0.1;
    for (const LoadingMode mode : {LoadingMode::Auto, LoadingMode::Resident}) {
      const LoaderOptions start = LoaderOptions::builder().batchSize(64).numWorkers(1).loadingMode(mode).build();
      const TuneResult r = autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, nullptr, nullptr);
      const bool decoded = std::any_of(r.notes.begin(), r.notes.end(),
                                       [](const std::string& n) { return n.find("decoded the dataset once") != std::string::npos; });
      QCOMPARE(decoded, mode == LoadingMode::Resident);
      QCOMPARE(QString::fromStdString(r.startMeasurement.mode), QString(mode == LoadingMode::Auto ? "streaming" : "resident"));
    }
  }

  // Ctrl-C during a search: with keepOnCancel (the CLI) the search so far comes back, the best
  // setting measured among it; without (Python's progress returning True, the workbench's Stop)
  // the cancel is thrown as before.
  void aCancelledSearchKeepsWhatItMeasured() {
    auto ds = parseSyntheticSpec("synthetic:1000000,8,f32,0,400");
    const LoaderOptions start = LoaderOptions::builder().batchSize(32).numWorkers(0).prefetch(1)
                                    .loadingMode(LoadingMode::Streaming).build();
    TuneSpec spec;
    spec.budgetSeconds = 60;
    spec.candidates = {{"num_workers", {"0", "1", "2", "4", "8"}}, {"prefetch", {"1", "2", "4", "8", "16"}}};
    spec.measure.warmupSeconds = 0.1;
    spec.measure.maxSeconds = 0.5;
    for (const bool keep : {true, false}) {
      spec.keepOnCancel = keep;
      CancelToken cancel;
      int trials = 0;
      const auto onTrial = [&](const TuneTrial&, double) {
        if (++trials == 3) cancel.cancel();
      };
      if (keep) {
        const TuneResult r = autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, &cancel, onTrial);
        QVERIFY(r.cancelled);
        QCOMPARE(r.trials.size(), std::size_t(3));
        QVERIFY2(r.confidence.find("Stopped (cancelled)") != std::string::npos, r.confidence.c_str());
        QVERIFY(r.bestMeasurement.samplesPerS > 0);
      } else {
        ErrorKind kind{};
        errorOf([&] { autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, &cancel, onTrial); }, &kind);
        QCOMPARE(kind, ErrorKind::Cancelled);
      }
    }
  }

  // The auto-tuner on a dataset whose optimum is designed in: every sample waits 400 us on
  // "storage" (a sleep, so readers beyond the cores still help) and costs no CPU. The best
  // setting is the most workers offered with a ring deep enough for them; the search must
  // find it in fewer trials than the grid has points, and say how sure it is.
  void autoTuneFindsTheDesignedOptimum() {
    auto ds = parseSyntheticSpec("synthetic:1000000,8,f32,0,400");
    LoaderOptions start = LoaderOptions::builder().batchSize(32).numWorkers(0).prefetch(1)
                              .loadingMode(LoadingMode::Streaming).build();
    TuneSpec spec;
    spec.budgetSeconds = 60;
    spec.candidates = {{"num_workers", {"0", "1", "2", "4", "8"}}, {"prefetch", {"1", "2", "4", "8", "16"}}};
    spec.measure.warmupSeconds = 0.2;
    std::vector<std::string> seen;
    const TuneResult r = autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, nullptr,
                                  [&seen](const TuneTrial& t, double) { seen.push_back(t.change); });
    qInfo("best: %s, %.0f samples/s (start %.0f), %zu trials in %.1f s, %d passes", r.bestChange.c_str(),
          r.bestMeasurement.samplesPerS, r.startMeasurement.samplesPerS, r.trials.size(), r.seconds, r.passes);
    QCOMPARE(r.best.num_workers, 8);
    QVERIFY2(r.best.prefetch >= 16, qPrintable(QString::number(r.best.prefetch)));
    QVERIFY(r.bestMeasurement.samplesPerS > 3 * r.startMeasurement.samplesPerS);
    QVERIFY(r.trials.size() < 25);  // the grid has 25 points
    QCOMPARE(seen.size(), r.trials.size());
    QVERIFY2(r.confidence.rfind("Clearly faster than the start", 0) == 0, r.confidence.c_str());
    QVERIFY(!r.budgetSpent);
    // Bad input is refused before anything runs.
    spec.budgetSeconds = 0;
    QVERIFY(errorOf([&] { autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, nullptr, nullptr); })
                .rfind("budget: must be a positive number of seconds", 0) == 0);
    spec.budgetSeconds = 5;
    spec.candidates = {{"num_wrokers", {"1"}}};
    QVERIFY(errorOf([&] { autoTune(ds, start, {DeviceSpec::parse("cpu")}, {}, spec, nullptr, nullptr); })
                .rfind("num_wrokers: not a loader knob", 0) == 0);
  }

  void persistentWorkersSurviveEpochs() {
    for (bool persistent : {true, false}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(100).numWorkers(2).persistentWorkers(persistent).build();
      Loader loader(numbered(), o);
      const auto before = WorkerPool::threadsStarted();
      for (int e = 0; e < 5; ++e)
        for (const Batch& b : loader.epoch(e)) (void)b;
      QCOMPARE(WorkerPool::threadsStarted() - before, persistent ? 0 : 10);
    }
  }

  void noLeaksOverAThousandShortEpochs() {
    const int threadsBefore = settledThreadCount();
    auto ds = numbered(64);
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(2).build();
    auto device = std::make_shared<SimDevice>(0, SimDeviceConfig{});
    std::int64_t allocations = 0;
    {
      Loader loader(ds, o, device);
      for (int e = 0; e < 1000; ++e) {
        Epoch epoch = loader.epoch(e);
        if (e % 3 == 0) {  // a third of them dropped after one batch
          epoch.next();
          continue;
        }
        for (const Batch& b : epoch) (void)b;
        if (e == 10) allocations = loader.poolAllocations();
      }
      // Blocks recycle: at most the ring's depth in flight plus the batch the consumer holds are
      // ever out at once, so a leak would pass that bound within 1000 epochs. (How many of them
      // a run needs depends on thread timing: comparing with the count at epoch 10 was flaky.)
      QVERIFY(allocations >= 1);
      QVERIFY2(loader.poolAllocations() <= o.prefetch + 1,
               qPrintable(QString("%1 blocks for a ring of %2").arg(loader.poolAllocations()).arg(o.prefetch)));
      QCOMPARE(settledThreadCount(), threadsBefore + 2);  // the two persistent workers
    }
    // Settled: a joined thread is still counted in /proc until the kernel has reaped it (pthread_join
    // returns when the thread left its memory, before that), so an unsettled count failed once in CI
    // with 3 for 2. A thread that leaked stays; one exiting does not.
    QCOMPARE(settledThreadCount(), threadsBefore);
    QCOMPARE(device->memory().used, 0);  // every device buffer returned
  }

  void telemetryReachesObservers() {
    auto recorder = std::make_shared<Recorder>();
    LoaderOptions o = LoaderOptions::builder().batchSize(100).workerId(3).build();
    Loader loader(numbered(), o, DeviceSpec::parse("sim:2"));
    loader.addObserver(recorder);
    for (int e = 0; e < 2; ++e)
      for (const Batch& b : loader.epoch(e)) (void)b;
    std::lock_guard<std::mutex> lock(recorder->mutex);
    QVERIFY(recorder->records.size() >= 2);
    const TelemetryRecord& last = recorder->records.back();
    QVERIFY(last.epoch_end);
    QCOMPARE(last.epoch, 1);
    QCOMPARE(last.step, 10);
    QCOMPARE(last.steps_total, 10);
    QCOMPARE(last.device, std::string("sim:2"));
    QCOMPARE(last.worker, 3);
    QCOMPARE(last.mode, std::string("resident"));
    QVERIFY(last.samples_per_s > 0 && last.bytes_per_s > 0);
    QVERIFY(last.prefetch_depth >= 1);
    QCOMPARE(last.mem_total, SimDeviceConfig{}.capacityBytes);
    QVERIFY(last.mem_allocated >= 24000);  // the resident dataset
    QVERIFY(last.batch_latency_p99_ms >= last.batch_latency_p50_ms);
  }

  void transformsAndMemoryFormat() {
    at::Tensor images = at::arange(20 * 2 * 3 * 4, at::kFloat).reshape({20, 2, 3, 4});
    auto ds = std::make_shared<TensorDataset>("images", std::vector<std::string>{"images"}, std::vector<at::Tensor>{images});
    LoaderOptions o = LoaderOptions::builder().batchSize(20).shuffle(false).enableTransforms(true).generatorSeed(1)
                          .memoryFormat(MemoryFormat::Nhwc).build();
    Loader loader(ds, o);
    at::Tensor first, again;
    for (const Batch& b : loader.epoch(0)) first = b["images"];
    for (const Batch& b : loader.epoch(0)) again = b["images"];
    QVERIFY(first.is_contiguous(at::MemoryFormat::ChannelsLast));
    QVERIFY(at::equal(first, again));  // seeded: the same flips
    int flipped = 0;
    for (int i = 0; i < 20; ++i) {
      if (at::equal(first[i], images[i].flip({-1}))) ++flipped;
      else QVERIFY(at::equal(first[i], images[i]));
    }
    QVERIFY2(flipped > 3 && flipped < 17, qPrintable(QString::number(flipped)));
  }

  void fileDatasetsInBothReaderModes() {
    const std::string path = dir_.filePath("data.safetensors").toStdString();
    auto ds = numbered(500);
    writeSafetensors(path, {{"x", hostTensorFromTorch(ds->hostFields()[0])}, {"y", hostTensorFromTorch(ds->hostFields()[1])}}, {});
    for (ReaderMode mode : {ReaderMode::Mmap, ReaderMode::Read}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(64).readerMode(mode).partSize(4096).dropLast(false).build();
      auto file = openDataset(path, o);
      QCOMPARE(file->size(), 500);
      Loader loader(file, o);
      QCOMPARE(checkEpoch(loader, 0, o, 500), QString());
    }
  }

  // The stream rule's API where no GPU is: batches on host devices have no stream to order, so
  // recording one returns at once, kept batches stay intact; a CUDA stream for a batch in host
  // memory (cpu) or on a simulated device is refused naming record_stream, before anything changes.
  void recordStreamOnHostDevices() {
    const c10::Stream host(c10::Stream::DEFAULT, c10::Device(c10::kCPU));
    const c10::Stream gpu(c10::Stream::UNSAFE, c10::Device(c10::kCUDA, 0), 3);
    for (const char* device : {"cpu", "sim:0"}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(50).numWorkers(2).loadingMode(LoadingMode::Streaming).build();
      Loader loader(numbered(), o, DeviceSpec::parse(device));
      std::vector<Batch> kept;
      for (const Batch& b : loader.epoch(0)) {
        b.recordStream(host);
        QCOMPARE(test::expectBadInput([&] { b.recordStream(gpu); }, {"record_stream", "cuda:0"}), QString());
        kept.push_back(b);
      }
      QCOMPARE(static_cast<int>(kept.size()), 20);
      for (const Batch& b : kept) QVERIFY(at::equal(b.tensors[1], b.indices));  // y = the sample's index
    }
  }

  void cudaDevice() {
#ifndef STOKER_WITH_CUDA
    QSKIP("this build's libtorch has no CUDA");
#else
    if (expandDevices("all").front().kind != DeviceKind::Cuda) QSKIP("no CUDA device visible");
    for (LoadingMode mode : {LoadingMode::Resident, LoadingMode::Streaming}) {
      LoaderOptions o = LoaderOptions::builder().batchSize(64).numWorkers(2).loadingMode(mode).dropLast(false).build();
      Loader loader(numbered(), o, DeviceSpec::parse("cuda:0"));
      Epoch epoch = loader.epoch(0);
      QVERIFY(epoch.next()->tensors[0].is_cuda());
      epoch.stop();
      QCOMPARE(checkEpoch(loader, 1, o, 1000), QString());
      QVERIFY(loader.memory().total > 0);
    }
#endif
  }

  void badDatasets_data() {
    QTest::addColumn<QString>("spec");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown") << "imagenet" << "unknown dataset";
    QTest::newRow("synthetic no shape") << "synthetic:100" << "synthetic:N,SHAPE";
    QTest::newRow("synthetic zero n") << "synthetic:0,4" << "positive sample count";
    QTest::newRow("synthetic bad shape") << "synthetic:10,3x0" << "SHAPE must be positive";
    QTest::newRow("synthetic bad dtype") << "synthetic:10,4,f33" << "unknown dtype";
    QTest::newRow("synthetic bad cost") << "synthetic:10,4,f32,-3" << "cost_us";
    QTest::newRow("synthetic bad wait") << "synthetic:10,4,f32,0,x" << "wait_us must be 0-10000000";
    QTest::newRow("synthetic too many") << "synthetic:10,4,f32,0,0,0" << "cost_us[,wait_us]";
    // Found by fuzz_dataset_spec: the sample size overflowed int64 (UBSan), and so could N x it.
    QTest::newRow("synthetic huge sample") << "synthetic:10,3x32x63332x2x63x63332x2x63x3x32x64" << "a sample of this shape is too large";
    QTest::newRow("synthetic huge dataset") << "synthetic:4611686018427387904,1024" << "N samples of this shape are too large";
    QTest::newRow("fashion dir") << "fashion-mnist:/nonexistent" << "dataset-fashion-mnist";
    QTest::newRow("missing file") << "/nonexistent/x.safetensors" << "/nonexistent/x.safetensors";
  }
  void badDatasets() {
    QFETCH(QString, spec);
    QFETCH(QString, expected);
    const std::string msg = errorOf([&] { openDataset(spec.toStdString()); });
    QVERIFY2(QString::fromStdString(msg).contains(expected), msg.c_str());
  }

  // Host blocks of 4 MiB and more start on a 2 MiB boundary and ask for huge pages (the image
  // pipeline's float32 batches spent ~5 % of its time in TLB misses on 4 KiB pages);
  // STOKER_HUGE_PAGES=0 leaves them plain, and any value but 0, 1 or empty stops a loader at its
  // construction.
  void largeHostBlocksAskForHugePages() {
    constexpr std::int64_t kMiB = 1 << 20;
    qunsetenv("STOKER_HUGE_PAGES");
    at::Tensor big = emptyHostBytes(40 * kMiB + 123);
    QCOMPARE(big.numel(), 40 * kMiB + 123);
    QCOMPARE(reinterpret_cast<std::uintptr_t>(big.data_ptr()) % (2 * kMiB), std::uintptr_t{0});
    std::memset(big.data_ptr(), 1, static_cast<std::size_t>(big.numel()));
    QCOMPARE(big[40 * kMiB + 122].item<std::uint8_t>(), std::uint8_t{1});
    QCOMPARE(static_cast<std::int64_t>(emptyHostBytes(kMiB).storage().nbytes()), kMiB);  // small: as asked
    qputenv("STOKER_HUGE_PAGES", "0");
    QCOMPARE(static_cast<std::int64_t>(emptyHostBytes(40 * kMiB).storage().nbytes()), 40 * kMiB);
    const LoaderOptions o = LoaderOptions::builder().batchSize(10).build();
    for (const char* bad : {"2", "yes", " 1", "01"}) {
      qputenv("STOKER_HUGE_PAGES", bad);
      const std::string msg = errorOf([&] { Loader loader(numbered(), o); });
      QVERIFY2(msg.find("STOKER_HUGE_PAGES") != std::string::npos &&
                   msg.find(std::string("must be 0 or 1 (got \"") + bad + "\")") != std::string::npos,
               msg.c_str());
    }
    qunsetenv("STOKER_HUGE_PAGES");
    // Whether the kernel gave huge pages: what /proc/self/smaps says of the touched block.
    std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(mode, modes);
    if (modes.empty() || modes.find("[never]") != std::string::npos)
      QSKIP("transparent huge pages are off on this kernel: the blocks stay on 4 KiB pages");
    QVERIFY2(anonHugeKiB(big.data_ptr()) > 0, "the touched 40 MiB block holds no huge page");
  }

  void fieldsMustShareDimZero() {
    const std::string path = dir_.filePath("mismatch.safetensors").toStdString();
    writeSafetensors(path, {{"a", hostTensorFromTorch(at::zeros({10, 2}))}, {"b", hostTensorFromTorch(at::zeros({9}))}}, {});
    const std::string msg = errorOf([&] { openDataset(path); });
    QVERIFY2(msg.find("same first dimension") != std::string::npos, msg.c_str());
  }
};

QTEST_GUILESS_MAIN(TestLoader)
#include "tst_loader.moc"
