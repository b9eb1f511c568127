// Multi-device feeding in one process on simulated devices: every step is
// split as the planner says (chunk ratios, El Che rounds), every batch holds
// the right rows, counts follow measured times, modes follow memory, the
// gather device is the resident one with the most free memory, and the fed
// epoch API refuses misuse.
#include <QtTest>

#include <ATen/ATen.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <set>

#include "data/cuda_gather.h"
#include "data/datasets/device_tensor_dataset.h"
#include "data/multi_device_loader.h"
#include "data/sampler.h"
#include "epoch_counting_dataset.h"
#include "expect_error.h"
#include "plan/el_che.h"
#include "plan/shard_plan.h"
#include "numbered_dataset.h"
#include "test_support.h"

using namespace stoker;
using stoker::test::EpochCountingDataset;
using stoker::test::numbered;
using stoker::test::expectBadInput;

namespace {

std::vector<std::shared_ptr<DeviceBackend>> sims(const std::vector<std::int64_t>& capacities) {
  std::vector<std::shared_ptr<DeviceBackend>> out;
  for (std::size_t d = 0; d < capacities.size(); ++d) {
    SimDeviceConfig c;
    c.capacityBytes = capacities[d];
    out.push_back(std::make_shared<SimDevice>(static_cast<int>(d), c));
  }
  return out;
}

// Every row of the batch is the sample its index names.
bool rowsMatch(const Batch& b) {
  const auto* idx = b.indices.data_ptr<std::int64_t>();
  const at::Tensor y = b["y"].cpu(), x = b["x"].cpu();
  for (std::int64_t i = 0; i < b.size(); ++i)
    if (y[i].item<std::int64_t>() != idx[i] || x[i][3].item<float>() != static_cast<float>(idx[i]) + 1.5f) return false;
  return true;
}

LoaderOptions baseOptions(std::int64_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.drop_last = false;
  o.seed = 3;
  o.num_workers = 2;
  o.prefetch = 3;
  return o;
}

}  // namespace

class TestMultiDevice : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void chunkRatiosFollowThePlan() {
    const std::int64_t n = 1003;
    auto ds = numbered(n);
    const auto o = baseOptions(16);
    MultiDeviceOptions m;
    m.weights = {3, 1, 2};
    MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30, 1LL << 30}), m);
    QCOMPARE(loader.stepShares(), (std::vector<std::int64_t>{24, 8, 16}));
    PlanRequest r;
    r.samples = n, r.worldSize = 3, r.batchSize = 16, r.seed = 3, r.epoch = 1, r.weights = m.weights;
    const auto plan = makeShardPlan(r);
    std::vector<std::vector<std::int64_t>> got(3);
    std::int64_t steps = 0;
    auto epoch = loader.epoch(1);
    while (auto step = epoch.next()) {
      ++steps;
      for (int d = 0; d < 3; ++d) {
        QCOMPARE(step->perDevice[static_cast<std::size_t>(d)].size(), std::size_t(1));
        const Batch& b = step->perDevice[static_cast<std::size_t>(d)][0];
        QVERIFY(rowsMatch(b));
        got[static_cast<std::size_t>(d)].insert(got[static_cast<std::size_t>(d)].end(), b.indices.data_ptr<std::int64_t>(),
                                                b.indices.data_ptr<std::int64_t>() + b.size());
      }
    }
    QCOMPARE(steps, plan.steps);
    for (int d = 0; d < 3; ++d) QVERIFY2(got[static_cast<std::size_t>(d)] == plan.ranks[static_cast<std::size_t>(d)].indices,
                                         qPrintable(QString("device %1").arg(d)));
  }

  // Chunk ratios epoch after epoch (stoker bench --device a,b): with Lookahead::NextEpoch the
  // workers make epoch 1's first steps while epoch 0's last is still held, and epoch 1 serves
  // those batches -- each sample of its plan read once -- in the planner's order. Without it,
  // nothing of epoch 1 is read before epoch(1) starts (the multi-device loader used to drain
  // its ring at every epoch's end).
  void chunkRatiosMakeTheNextEpochAhead() {
    const std::int64_t n = 203;  // 12 steps of 12 + 4, then a short step of 11 split 3:1
    LoaderOptions o = baseOptions(8);
    o.loading_mode = LoadingMode::Streaming;  // read by the workers, so the dataset counts them
    MultiDeviceOptions m;
    m.weights = {3, 1};
    for (const bool ahead : {true, false}) {
      auto ds = std::make_shared<EpochCountingDataset>(n);
      MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30}), m);
      QCOMPARE(loader.stepShares(), (std::vector<std::int64_t>{12, 4}));
      const auto lookahead = ahead ? Loader::Lookahead::NextEpoch : Loader::Lookahead::Off;
      for (std::int64_t e : {0, 1}) {
        PlanRequest r;
        r.samples = n, r.worldSize = 2, r.batchSize = 8, r.seed = 3, r.epoch = e, r.weights = m.weights;
        const auto plan = makeShardPlan(r);
        std::vector<std::vector<std::int64_t>> got(2);
        std::int64_t steps = 0, samples = 0;
        auto epoch = loader.epoch(e, lookahead);
        while (auto step = epoch.next()) {
          ++steps;
          for (std::size_t d = 0; d < 2; ++d) {
            QCOMPARE(step->perDevice[d].size(), std::size_t(1));
            const Batch& b = step->perDevice[d][0];
            QCOMPARE(b.epoch, e);
            QVERIFY(at::equal(b["v"], b.indices));
            got[d].insert(got[d].end(), b.indices.data_ptr<std::int64_t>(), b.indices.data_ptr<std::int64_t>() + b.size());
            samples += b.size();
          }
          if (e == 0 && steps == plan.steps) {  // epoch 0's last step, still held
            if (ahead) {
              QTRY_VERIFY_WITH_TIMEOUT(ds->readsOf(1) >= 8, 5000);
            } else {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              QCOMPARE(ds->readsOf(1), std::int64_t{0});
            }
          }
        }
        QCOMPARE(steps, plan.steps);
        for (std::size_t d = 0; d < 2; ++d)
          QVERIFY2(got[d] == plan.ranks[d].indices, qPrintable(QString("epoch %1, device %2").arg(e).arg(d)));
        // Every batch made early was served: the epoch read exactly what it handed out.
        if (e == 1) QCOMPARE(ds->readsOf(1), samples);
      }
    }
  }

  void elCheCountsFollowMeasuredTimes() {
    const std::int64_t n = 2000;
    auto ds = numbered(n);
    auto o = baseOptions(10);
    MultiDeviceOptions m;
    m.elChe = true;
    m.anchorBatches = 2;
    m.lookaheadRounds = 1;
    MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30}), m);
    std::multiset<std::int64_t> seen;
    std::vector<std::vector<std::int64_t>> countsSeen;
    auto epoch = loader.epoch(0);
    while (auto step = epoch.next()) {
      std::vector<std::int64_t> counts;
      std::int64_t stepSamples = 0;
      for (int d = 0; d < 2; ++d) {
        const auto& batches = step->perDevice[static_cast<std::size_t>(d)];
        counts.push_back(static_cast<std::int64_t>(batches.size()));
        for (const auto& b : batches) {
          QVERIFY(rowsMatch(b));
          stepSamples += b.size();
          seen.insert(b.indices.data_ptr<std::int64_t>(), b.indices.data_ptr<std::int64_t>() + b.size());
        }
        // Device 1 is three times slower per batch (a simulated unequal GPU).
        loader.recordStepTime(d, (d == 0 ? 5.0 : 15.0) * static_cast<double>(batches.size()),
                              static_cast<std::int64_t>(batches.size()));
      }
      QCOMPARE(stepSamples, static_cast<std::int64_t>(step->indices.size()));
      countsSeen.push_back(counts);
    }
    QCOMPARE(countsSeen.front(), (std::vector<std::int64_t>{2, 2}));  // before any measurement
    QCOMPARE(countsSeen[3], (std::vector<std::int64_t>{6, 2}));       // 3x as many on the fast device
    QCOMPARE(loader.elChe()->anchorDevice(), 1);
    // Whole epoch: every sample exactly once (2000 = 200 batches, no tail).
    QCOMPARE(static_cast<std::int64_t>(seen.size()), n);
    QCOMPARE(static_cast<std::int64_t>(std::set<std::int64_t>(seen.begin(), seen.end()).size()), n);
  }

  // El Che epoch after epoch (stoker bench --device a,b --split elche): with Lookahead::NextEpoch,
  // once epoch 0's order is used up each device gets epoch 1 queued as a fed epoch with its first
  // rounds, so the workers read epoch 1's samples while epoch 0's last step is still held; epoch 1
  // then serves exactly those, and the rest of its order, once.
  void elCheMakesTheNextEpochAhead() {
    const std::int64_t n = 203;
    LoaderOptions o = baseOptions(8);
    o.loading_mode = LoadingMode::Streaming;  // read by the workers, so the dataset counts them
    MultiDeviceOptions m;
    m.elChe = true;
    m.anchorBatches = 2;
    m.lookaheadRounds = 2;
    for (const bool ahead : {true, false}) {
      auto ds = std::make_shared<EpochCountingDataset>(n);
      MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30}), m);
      const auto lookahead = ahead ? Loader::Lookahead::NextEpoch : Loader::Lookahead::Off;
      for (std::int64_t e : {0, 1}) {
        const std::vector<std::int64_t> order = epochIndicesFor(*ds, o, e);
        std::vector<std::int64_t> served;  // every step's indices, device 0's first
        std::int64_t samples = 0;
        auto epoch = loader.epoch(e, lookahead);
        while (auto step = epoch.next()) {
          std::vector<std::int64_t> fromBatches;
          for (std::size_t d = 0; d < 2; ++d) {
            for (const Batch& b : step->perDevice[d]) {
              QCOMPARE(b.epoch, e);
              QVERIFY(at::equal(b["v"], b.indices));
              fromBatches.insert(fromBatches.end(), b.indices.data_ptr<std::int64_t>(),
                                 b.indices.data_ptr<std::int64_t>() + b.size());
              samples += b.size();
            }
            // Device 1 is three times slower per batch: the counts move while the epochs run.
            const auto batches = static_cast<std::int64_t>(step->perDevice[d].size());
            loader.recordStepTime(static_cast<int>(d), (d == 0 ? 5.0 : 15.0) * static_cast<double>(batches), batches);
          }
          QCOMPARE(fromBatches, step->indices);
          served.insert(served.end(), step->indices.begin(), step->indices.end());
          if (e == 0 && static_cast<std::int64_t>(served.size()) >= n) {  // epoch 0's last step, still held
            if (ahead) {
              QTRY_VERIFY_WITH_TIMEOUT(ds->readsOf(1) >= 8, 5000);
            } else {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              QCOMPARE(ds->readsOf(1), std::int64_t{0});
            }
          }
        }
        // The sampler's order, then padding from its start (the last round's short batches).
        QVERIFY(static_cast<std::int64_t>(served.size()) >= n && static_cast<std::int64_t>(served.size()) < n + 2 * 8);
        for (std::size_t i = 0; i < served.size(); ++i)
          QVERIFY2(served[i] == order[i % order.size()], qPrintable(QString("epoch %1, position %2").arg(e).arg(i)));
        // Every batch made early was served: the epoch read exactly what it handed out.
        if (e == 1) QCOMPARE(ds->readsOf(1), samples);
      }
    }
    // A device whose queued epoch was dropped in between (a retune) makes every device start the
    // epoch afresh: it is still the sampler's order, once.
    auto ds = std::make_shared<EpochCountingDataset>(n);
    MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30}), m);
    {
      auto epoch = loader.epoch(0, Loader::Lookahead::NextEpoch);
      while (epoch.next()) {
      }
    }
    QTRY_VERIFY_WITH_TIMEOUT(ds->readsOf(1) >= 8, 5000);  // queued, and made
    loader.loader(0).retune(loader.loader(0).options());
    const std::vector<std::int64_t> order = epochIndicesFor(*ds, o, 1);
    std::vector<std::int64_t> served;
    auto epoch = loader.epoch(1);
    while (auto step = epoch.next()) served.insert(served.end(), step->indices.begin(), step->indices.end());
    QVERIFY(static_cast<std::int64_t>(served.size()) >= n);
    for (std::size_t i = 0; i < served.size(); ++i) QCOMPARE(served[i], order[i % order.size()]);
  }

  // The fed epoch queued behind a fed one (Epoch::queueNextFed): refused while the feed is open,
  // for an epoch that is not fed and without workers; feed() then goes to it; openEpoch adopts it
  // with its batches made, unless it asks for more room than it has.
  void aQueuedFedEpochIsAdoptedByOpenEpoch() {
    auto ds = std::make_shared<EpochCountingDataset>(100);
    auto o = baseOptions(4);
    o.loading_mode = LoadingMode::Streaming;  // read by the workers, so the dataset counts them
    Loader l(ds, o, DeviceSpec::parse("sim:0"));
    const std::int64_t first[] = {1, 2, 3, 4, 5}, second[] = {10, 11, 12, 13, 14, 15};
    {
      auto e0 = l.openEpoch(0, 10);
      e0.feed(first, 5, 4);
      QVERIFY(!e0.queueNextFed(1, 10));  // its own feed is still open
      e0.closeFeed();
      QVERIFY(e0.queueNextFed(1, 10));
      QVERIFY(!e0.queueNextFed(2, 10));  // one is queued already
      e0.feed(second, 6, 4);             // to epoch 1
      e0.closeFeed();
      QCOMPARE(e0.batches(), std::int64_t{2});  // epoch 0's own: 4 + 1
      QTRY_VERIFY_WITH_TIMEOUT(ds->readsOf(1) >= 4, 5000);  // epoch 1's made within the ring
      std::vector<std::int64_t> got;
      while (auto b = e0.next()) got.insert(got.end(), b->indices.data_ptr<std::int64_t>(), b->indices.data_ptr<std::int64_t>() + b->size());
      QCOMPARE(got, (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
    }
    auto e1 = l.openEpoch(1, 10);
    QCOMPARE(e1.batches(), std::int64_t{2});  // adopted: 4 + 2, fed and closed
    std::vector<std::int64_t> got;
    while (auto b = e1.next()) {
      QCOMPARE(b->epoch, std::int64_t{1});
      got.insert(got.end(), b->indices.data_ptr<std::int64_t>(), b->indices.data_ptr<std::int64_t>() + b->size());
    }
    QCOMPARE(got, (std::vector<std::int64_t>{10, 11, 12, 13, 14, 15}));
    QCOMPARE(ds->readsOf(1), std::int64_t{6});
    {  // more room asked than queued: not adopted, a fresh epoch
      auto e2 = l.openEpoch(2, 10);
      e2.closeFeed();
      QVERIFY(e2.queueNextFed(3, 10));
      e2.feed(first, 5, 4);
      e2.closeFeed();
      QVERIFY(!e2.next());
    }
    auto e3 = l.openEpoch(3, 50);
    QCOMPARE(e3.batches(), std::int64_t{0});
    e3.closeFeed();
    QVERIFY(!e3.next());
    // Not a fed epoch; no workers.
    QVERIFY(!l.epoch(4).queueNextFed(5, 10));
    LoaderOptions none = o;
    none.num_workers = 0;
    Loader alone(ds, none, DeviceSpec::parse("sim:0"));
    auto fed = alone.openEpoch(0, 10);
    fed.closeFeed();
    QVERIFY(!fed.queueNextFed(1, 10));
    QVERIFY(expectBadInput([&] { fed.queueNextFed(-1, 10); }, {"epoch -1", "non-negative"}).isEmpty());
  }

  void elCheTailIsDealtEvenlyOrDropped() {
    auto ds = numbered(95);
    for (bool drop : {false, true}) {
      auto o = baseOptions(10);
      o.drop_last = drop;
      MultiDeviceOptions m;
      m.elChe = true;
      m.anchorBatches = 4;
      MultiDeviceLoader loader(ds, o, sims({1LL << 30, 1LL << 30}), m);
      std::set<std::int64_t> seen;
      std::int64_t entries = 0;
      auto epoch = loader.epoch(0);
      while (auto step = epoch.next())
        for (const auto& batches : step->perDevice)
          for (const auto& b : batches) {
            entries += b.size();
            seen.insert(b.indices.data_ptr<std::int64_t>(), b.indices.data_ptr<std::int64_t>() + b.size());
          }
      // Rounds of 4+4 batches: 80 samples; 15 left = 1 whole batch + 5.
      if (drop) {
        QCOMPARE(entries, std::int64_t{80});
      } else {
        QCOMPARE(static_cast<std::int64_t>(seen.size()), std::int64_t{95});
        QCOMPARE(entries, std::int64_t{96});  // 8 each: one padding sample
      }
    }
  }

  void modesFollowMemoryAndGatherPicksMostFree() {
    auto ds = numbered(4000);  // 4000 * (16 + 8) bytes = 96 KB
    auto o = baseOptions(32);
    // Device 0 is too small to hold the dataset: it streams. Device 2 has
    // the most free memory of the resident two: it gathers.
    MultiDeviceLoader loader(ds, o, sims({64 << 10, 8 << 20, 64 << 20}));
    QCOMPARE(loader.loader(0).mode(), LoadingMode::Streaming);
    QCOMPARE(loader.loader(1).mode(), LoadingMode::Resident);
    QCOMPARE(loader.loader(2).mode(), LoadingMode::Resident);
    QCOMPARE(loader.gatherDevice(), 2);
    auto epoch = loader.epoch(0);
    const auto step = epoch.next();
    QVERIFY(step);
    for (const auto& batches : step->perDevice) QVERIFY(rowsMatch(batches[0]));
    const Batch whole = loader.gather(*step);
    QCOMPARE(whole.size(), std::int64_t{96});
    QVERIFY(rowsMatch(whole));
    QVERIFY(std::equal(step->indices.begin(), step->indices.end(), whole.indices.data_ptr<std::int64_t>()));
    bool gatherNoted = false;
    for (const auto& n : loader.notes()) gatherNoted |= n == "gather device: sim:2";
    QVERIFY(gatherNoted);
  }

  // What the NCCL replication of several CUDA devices rests on, checked without a GPU: a loader
  // handed its resident fields on the device uses them instead of loading (and says how they
  // came), unless told to stream; sim devices are not replicated to (each loads from the host);
  // the broadcast itself declines with its reason where it cannot run. The broadcast between real
  // GPUs waits for a machine with two of them.
  void aLoaderGivenItsResidentFieldsUsesThem() {
    auto ds = numbered(1000);
    auto o = baseOptions(50);
    std::vector<at::Tensor> onDevice;
    for (const auto& f : ds->hostFields()) onDevice.push_back(f.clone());
    Loader given(ds, o, sims({64 << 20}).front(), nullptr, onDevice);
    QCOMPARE(given.mode(), LoadingMode::Resident);
    QCOMPARE(given.residentFields()[0].data_ptr(), onDevice[0].data_ptr());  // used, not copied
    const auto notes = given.notes();
    QVERIFY(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("handed to the loader on sim:0") != std::string::npos; }));
    for (const Batch& b : given.epoch(0)) QVERIFY(rowsMatch(b));

    o.loading_mode = LoadingMode::Streaming;
    Loader streaming(ds, o, sims({64 << 20}).front(), nullptr, onDevice);
    QCOMPARE(streaming.mode(), LoadingMode::Streaming);
    QVERIFY(streaming.residentFields().empty());

    MultiDeviceLoader simulated(ds, baseOptions(50), sims({64 << 20, 64 << 20}));
    for (const auto& n : simulated.notes()) QVERIFY2(n.find("NCCL") == std::string::npos, n.c_str());
    const ResidentReplicas none = broadcastResident(ds->hostFields(), sims({64 << 20}));
    QVERIFY(none.perTarget.empty());
    QVERIFY2(!none.why.empty(), "a declined broadcast says why");
  }

  // A script's tensors already on the loader's device (Python: CUDA tensors as the dataset),
  // checked on a sim device, whose tensors are host tensors: the loader is resident on them as
  // given, serves every sample, and never reads one on the host; streaming, a tensor on another
  // device, and a strided one are refused by name.
  void aLoaderOverDeviceTensorsUsesThemWhereTheyLie() {
    auto ds = numbered(1000);
    const std::vector<at::Tensor> fields = ds->hostFields();
    auto o = baseOptions(64);
    auto loader = loaderOverDeviceTensors({"x", "y"}, fields, o, sims({64 << 20}).front());
    QCOMPARE(loader->mode(), LoadingMode::Resident);
    QCOMPARE(loader->residentFields()[0].data_ptr(), fields[0].data_ptr());  // used, not copied
    QCOMPARE(loader->dataset().description(), std::string("tensors on sim:0"));
    std::set<std::int64_t> seen;
    for (const Batch& b : loader->epoch(0)) {
      QVERIFY(rowsMatch(b));
      for (std::int64_t i = 0; i < b.size(); ++i) seen.insert(b.indices.data_ptr<std::int64_t>()[i]);
    }
    QCOMPARE(seen.size(), std::size_t{1000});
    std::uint8_t slot[16];
    std::uint8_t* dst[] = {slot, slot};
    NAMED(expectBadInput([&] { loader->dataset().readItem(7, dst); }, {"sample 7", "never read on the host"}));

    o.loading_mode = LoadingMode::Streaming;
    NAMED(expectBadInput([&] { loaderOverDeviceTensors({"x", "y"}, fields, o, sims({64 << 20}).front()); },
                         {"loading_mode streaming", "resident there"}));
    o.loading_mode = LoadingMode::Auto;
    NAMED(expectBadInput([&] { loaderOverDeviceTensors({"x", "y"}, {fields[0], at::empty({1000}, at::TensorOptions().dtype(at::kLong).device(at::kMeta))}, o, sims({64 << 20}).front()); },
                         {"y", "is on meta", "the loader's device is sim:0"}));
    NAMED(expectBadInput([&] { loaderOverDeviceTensors({"x", "y"}, {fields[0].t().contiguous().t(), fields[1]}, o, sims({64 << 20}).front()); },
                         {"x", "not contiguous"}));
    NAMED(expectBadInput([&] { loaderOverDeviceTensors({"x", "y"}, {fields[0], fields[1].narrow(0, 0, 10)}, o, sims({64 << 20}).front()); },
                         {"y", "same first dimension"}));
  }

  // The CUDA gather kernel's work, run on the host in the kernel's own indexing (no GPU here):
  // every field of every row lands where gatherHostRows puts it, at every element width the
  // alignments allow, across launches split at kMaxRows.
  void gatherKernelIndexingOnTheHost() {
    using namespace stoker::cuda_gather;
    alignas(16) static unsigned char probe[64];
    QCOMPARE(elementWidth(probe, probe + 16, 4096), 16);
    QCOMPARE(elementWidth(probe, probe + 8, 4096), 8);
    QCOMPARE(elementWidth(probe, probe, 12), 4);
    QCOMPARE(elementWidth(probe + 2, probe, 6), 2);
    QCOMPARE(elementWidth(probe, probe + 1, 4096), 1);
    QCOMPARE(elementWidth(probe, probe, 3), 1);

    const std::int64_t n = 3000;
    std::vector<std::int64_t> all(2500);
    for (std::int64_t i = 0; i < 2500; ++i) all[static_cast<std::size_t>(i)] = (i * 7919 + 13) % n;  // repeats, any order
    all[0] = n - 1;
    // As CudaDevice::gatherBatch splits a batch: launches of L::kRows rows at most.
    auto gather = [&](auto launch, std::int64_t count, std::int64_t rowBytes, std::int64_t dstShift) {
      using L = decltype(launch);
      const at::Tensor field = at::randint(0, 256, {n, rowBytes}, at::kByte);
      const at::Tensor labels = at::arange(n, at::kLong);
      at::Tensor expectedX = at::empty({count, rowBytes}, at::kByte), expectedY = at::empty({count}, at::kLong);
      gatherHostRows(field, all.data(), count, expectedX.data_ptr());
      gatherHostRows(labels, all.data(), count, expectedY.data_ptr());
      at::Tensor outX = at::zeros({count * rowBytes + 16}, at::kByte), outY = at::zeros({count}, at::kLong);
      auto* dstX = outX.data_ptr<std::uint8_t>() + dstShift;
      std::int32_t widest = 0;
      int launches = 0;
      for (std::int64_t r0 = 0; r0 < count; r0 += L::kRows, ++launches) {
        auto a = std::make_unique<L>();
        a->fieldCount = 2;
        a->rows = static_cast<std::int32_t>(std::min<std::int64_t>(L::kRows, count - r0));
        std::copy(all.begin() + r0, all.begin() + r0 + a->rows, a->idx);
        a->fields[0] = {field.data_ptr<std::uint8_t>(), dstX + r0 * rowBytes, rowBytes,
                        elementWidth(field.data_ptr(), dstX + r0 * rowBytes, rowBytes)};
        auto* dstY = reinterpret_cast<unsigned char*>(outY.data_ptr<std::int64_t>() + r0);
        a->fields[1] = {reinterpret_cast<const unsigned char*>(labels.data_ptr<std::int64_t>()), dstY, 8,
                        elementWidth(labels.data_ptr(), dstY, 8)};
        widest = std::max(widest, a->fields[0].width);
        QVERIFY(fits32(*a));
        QVERIFY(blocksFor(*a, 256, 64) >= 1 && blocksFor(*a, 256, 64) <= 64);
        runOnHost(*a);
      }
      QCOMPARE(launches, static_cast<int>((count + L::kRows - 1) / L::kRows));
      QVERIFY2(at::equal(outX.narrow(0, dstShift, count * rowBytes).view({count, rowBytes}), expectedX),
               qPrintable(QString("row bytes %1, shift %2, width %3").arg(rowBytes).arg(dstShift).arg(widest)));
      QVERIFY(at::equal(outY, expectedY));
      QVERIFY(dstShift == 1 || rowBytes % 16 != 0 || widest == 16);  // the aligned case takes the wide path
    };
    for (const std::int64_t rowBytes : {std::int64_t{1}, std::int64_t{3}, std::int64_t{8}, std::int64_t{12},
                                        std::int64_t{4100}, std::int64_t{4096}})
      for (const std::int64_t dstShift : {std::int64_t{0}, std::int64_t{1}}) {
        gather(Launch{}, 2500, rowBytes, dstShift);  // two launches
        gather(SmallLaunch{}, 200, rowBytes, dstShift);  // one small launch
        gather(SmallLaunch{}, 600, rowBytes, dstShift);  // three
      }
    Launch tiny;
    tiny.fieldCount = 1;
    tiny.rows = 1;
    tiny.fields[0].rowBytes = 16;
    tiny.fields[0].width = 16;
    QCOMPARE(blocksFor(tiny, 256, 1056), 1);
  }

  // Host memory is where cpu and sim batches are made: streaming an in-memory dataset to them
  // maps nothing, says nothing of it, and still stages each batch.
  void devicesWithoutMappingStageStreamingBatches() {
    auto sim = sims({1LL << 30})[0];
    std::string why = "untouched";
    QVERIFY(!sim->mapHostFields({at::zeros({4, 4})}, why));
    QVERIFY(why.empty());
    LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(2).loadingMode(LoadingMode::Streaming)
                          .pinMemory(true).build();
    Loader loader(numbered(256), o, sim);
    for (const auto& note : loader.notes()) QVERIFY2(note.find("host memory") == std::string::npos, note.c_str());
    std::int64_t rows = 0;
    for (const Batch& b : loader.epoch(0)) {
      QVERIFY(rowsMatch(b));
      rows += b.size();
    }
    QCOMPARE(rows, std::int64_t{256});
  }

  void badSetupsAndFeedMisuseAreRefused() {
    auto ds = numbered(100);
    const auto o = baseOptions(8);
    QVERIFY(expectBadInput([&] { MultiDeviceLoader l(ds, o, {}); }, {"devices", "at least one"}).isEmpty());
    MultiDeviceOptions wrongCount;
    wrongCount.weights = {1, 2, 3};
    QVERIFY(expectBadInput([&] { MultiDeviceLoader l(ds, o, sims({1 << 20, 1 << 20}), wrongCount); },
                           {"device weights", "3 entries", "world size 2"})
                .isEmpty());
    MultiDeviceOptions zero;
    zero.weights = {1, 0};
    QVERIFY(expectBadInput([&] { MultiDeviceLoader l(ds, o, sims({1 << 20, 1 << 20}), zero); }, {"rank 1", "positive"})
                .isEmpty());
    MultiDeviceOptions both;
    both.weights = {1, 1};
    both.elChe = true;
    QVERIFY(expectBadInput([&] { MultiDeviceLoader l(ds, o, sims({1 << 20, 1 << 20}), both); }, {"not both"}).isEmpty());
    QVERIFY(expectBadInput([] { expandDevices("sim:0,sim:0"); }, {"sim:0", "twice"}).isEmpty());
    QCOMPARE(expandDevices("sim:0,sim:1,cpu").size(), std::size_t(3));

    Loader single(ds, o, DeviceSpec::parse("sim:0"));
    auto fed = single.openEpoch(0, 20);
    const std::int64_t bad[] = {5, 100};
    QVERIFY(expectBadInput([&] { fed.feed(bad, 2, 2); }, {"sample 100", "out of range"}).isEmpty());
    const std::int64_t good[] = {1, 2, 3};
    QVERIFY(expectBadInput([&] { fed.feed(good, 3, 9); }, {"batch size 9", "1-8"}).isEmpty());
    QVERIFY(expectBadInput([&] { fed.next(); }, {"no batch fed"}).isEmpty());
    fed.feed(good, 3, 2);
    QCOMPARE(fed.next()->size(), std::int64_t{2});
    QCOMPARE(fed.next()->size(), std::int64_t{1});
    std::vector<std::int64_t> many(30, 1);
    QVERIFY(expectBadInput([&] { fed.feed(many.data(), 30, 8); }, {"more samples than the 20"}).isEmpty());
    fed.closeFeed();
    QVERIFY(!fed.next());
    QVERIFY(expectBadInput([&] { fed.feed(good, 3, 2); }, {"feed is closed"}).isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestMultiDevice)
#include "tst_multi_device.moc"
