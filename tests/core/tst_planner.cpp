// Planner: torch parity against Debian's PyTorch, the invariants of every
// policy over thousands of random requests (each sample once unless padded
// or dropped, padding counts, equal shares, determinism, elastic resume),
// chunk ratios, El Che counts and clamping, the esper env iterator, and
// every bad request the issue names.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "data/sampler.h"
#include "expect_error.h"
#include "plan/chunk_ratios.h"
#include "plan/el_che.h"
#include "plan/env_batches.h"
#include "plan/shard_plan.h"
#include "test_support.h"

using namespace stoker;
using stoker::test::expectBadInput;

namespace {

std::vector<std::int64_t> toVector(const QJsonArray& a) {
  std::vector<std::int64_t> v;
  for (const auto& x : a) v.push_back(x.toInteger());
  return v;
}

// Checks what every plan promises; returns "" or the first broken promise.
QString checkInvariants(const PlanRequest& r, const ShardPlan& p) {
  const auto order = epochOrder(p.samples, r.seed, r.epoch, r.shuffle);
  const std::set<std::int64_t> remaining(order.begin() + r.resumeFrom, order.end());
  if (p.remaining != static_cast<std::int64_t>(remaining.size())) return "remaining count";
  std::map<std::int64_t, int> seen;
  std::int64_t entries = 0, padding = 0;
  for (const auto& rank : p.ranks) {
    for (auto i : rank.indices) {
      if (!remaining.count(i)) return QString("rank %1 got sample %2 outside the remaining order").arg(rank.rank).arg(i);
      ++seen[i];
    }
    entries += static_cast<std::int64_t>(rank.indices.size());
    padding += rank.padding;
    const auto stepped = std::accumulate(rank.stepSizes.begin(), rank.stepSizes.end(), std::int64_t{0});
    if (p.policy != "torch" && stepped != static_cast<std::int64_t>(rank.indices.size())) return "steps do not add up";
    if (p.policy == "torch" && stepped > static_cast<std::int64_t>(rank.indices.size())) return "steps exceed samples";
    if (p.policy == "weighted")
      for (auto s : rank.stepSizes)
        if (s < 1) return QString("rank %1 idles in a step").arg(rank.rank);
  }
  if (padding != p.padding) return "padding total differs from the ranks' sum";
  if (entries != static_cast<std::int64_t>(seen.size()) + p.padding)
    return QString("%1 entries, %2 distinct, %3 padding").arg(entries).arg(seen.size()).arg(p.padding);
  if (static_cast<std::int64_t>(seen.size()) + p.dropped != p.remaining)
    return QString("%1 distinct + %2 dropped != %3 remaining").arg(seen.size()).arg(p.dropped).arg(p.remaining);
  if (p.padding > 0 && p.dropped > 0) return "both padded and dropped";
  if (!r.dropLast && p.dropped != 0) return "dropped without drop_last";
  if (p.policy == "torch")
    for (const auto& rank : p.ranks)
      if (rank.indices.size() != p.ranks[0].indices.size()) return "torch shares differ in size";
  return {};
}

PlanRequest randomRequest(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  PlanRequest r;
  r.samples = pick(1, 1500);
  r.worldSize = static_cast<int>(pick(1, 40));
  r.seed = static_cast<std::uint64_t>(pick(0, 1 << 30));
  r.epoch = pick(0, 20);
  r.shuffle = pick(0, 4) != 0;
  r.dropLast = pick(0, 1) == 1;
  r.resumeFrom = pick(0, 2) == 0 ? 0 : pick(0, r.samples);
  const auto policy = pick(0, 2);
  r.batchSize = policy == 0 && pick(0, 1) ? 0 : pick(1, 32);
  if (policy == 1)
    for (int k = 0; k < r.worldSize; ++k) r.weights.push_back(static_cast<double>(pick(1, 1000)) / 100.0);
  if (policy == 2) {
    for (int k = 0; k < r.worldSize; ++k) r.stepMs.push_back(static_cast<double>(pick(5, 400)) / 10.0);
    r.anchorBatches = pick(1, 6);
  }
  return r;
}

bool requestValid(const PlanRequest& r) {
  try {
    validatePlanRequest(r);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

class TestPlanner : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void torchParity() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    // (n, world, drop_last, shuffle, seed, epoch, batch)
    const QList<QList<qint64>> cases = {{10, 3, 0, 1, 0, 0, 0},      {10, 3, 1, 1, 0, 0, 2},   {10, 3, 0, 1, 7, 5, 3},
                                        {2, 5, 0, 1, 1, 0, 0},       {2, 5, 1, 1, 1, 0, 0},    {1000, 8, 0, 1, 42, 3, 16},
                                        {1001, 8, 1, 1, 42, 3, 7},   {17, 4, 0, 0, 0, 0, 2},   {17, 4, 1, 0, 0, 0, 0},
                                        {60000, 7, 0, 1, 123456789, 11, 256}, {5, 1, 0, 1, 3, 1, 0}};
    QByteArray error;
    const QByteArray torch = stoker::test::torchDistributedIndices(cases, &error);
    QVERIFY2(!torch.isEmpty(), error.constData());
    const QJsonArray expected = QJsonDocument::fromJson(torch).array();
    QCOMPARE(expected.size(), cases.size());
    for (int i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      PlanRequest r;
      r.samples = c[0];
      r.worldSize = static_cast<int>(c[1]);
      r.dropLast = c[2] != 0;
      r.shuffle = c[3] != 0;
      r.seed = static_cast<std::uint64_t>(c[4]);
      r.epoch = c[5];
      r.batchSize = c[6];
      const auto plan = makeShardPlan(r);
      QCOMPARE(plan.policy, std::string("torch"));
      for (int rank = 0; rank < c[1]; ++rank)
        QVERIFY2(plan.ranks[static_cast<std::size_t>(rank)].indices == toVector(expected[i].toArray()[rank].toArray()),
                 qPrintable(QString("case %1 rank %2").arg(i).arg(rank)));
      QVERIFY2(checkInvariants(r, plan).isEmpty(), qPrintable(checkInvariants(r, plan)));
    }
  }

  void invariantsHoldOverThousandsOfRandomRequests() {
    std::mt19937_64 rng(20261122);
    int checked = 0, rejected = 0;
    for (int i = 0; i < 4000; ++i) {
      const PlanRequest r = randomRequest(rng);
      if (!requestValid(r)) {  // only batch > share with drop_last may be refused here
        QVERIFY(r.dropLast && r.batchSize > 0);
        ++rejected;
        continue;
      }
      const ShardPlan p = makeShardPlan(r);
      const QString broken = checkInvariants(r, p);
      QVERIFY2(broken.isEmpty(), qPrintable(QString("case %1 (%2 samples, world %3, policy %4, resume %5): %6")
                                                .arg(i).arg(r.samples).arg(r.worldSize)
                                                .arg(QString::fromStdString(p.policy)).arg(r.resumeFrom).arg(broken)));
      if (i % 50 == 0) QVERIFY(shardPlanToJson(r, makeShardPlan(r)) == shardPlanToJson(r, p));  // deterministic
      ++checked;
    }
    QVERIFY2(checked > 3000, qPrintable(QString("only %1 valid cases (%2 refused)").arg(checked).arg(rejected)));
  }

  void resumeOnAnotherWorldSizeCoversTheEpochOnce() {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 500; ++i) {
      PlanRequest before = randomRequest(rng);
      before.weights.clear(), before.stepMs.clear(), before.dropLast = false, before.resumeFrom = 0;
      before.batchSize = std::uniform_int_distribution<std::int64_t>(1, 16)(rng);
      const auto first = makeShardPlan(before);
      // Stop after s whole steps on the old world size: the consumed prefix
      // of the global order is s * batch * world samples.
      const std::int64_t steps = std::uniform_int_distribution<std::int64_t>(0, first.steps)(rng);
      const std::int64_t k = std::min(before.samples, steps * before.batchSize * before.worldSize);
      PlanRequest after = before;
      after.worldSize = static_cast<int>(std::uniform_int_distribution<int>(1, 40)(rng));
      after.resumeFrom = k;
      const auto second = makeShardPlan(after);
      std::multiset<std::int64_t> consumed;
      for (const auto& rank : first.ranks)
        for (std::int64_t s = 0; s < steps * before.batchSize; ++s)
          if (s < static_cast<std::int64_t>(rank.indices.size())) consumed.insert(rank.indices[static_cast<std::size_t>(s)]);
      std::set<std::int64_t> resumed;
      for (const auto& rank : second.ranks) {
        QCOMPARE(rank.indices.size(), second.ranks[0].indices.size());  // equal counts per rank
        resumed.insert(rank.indices.begin(), rank.indices.end());
      }
      // What ran before the stop (minus padding repeats) and what runs after
      // are disjoint and together are the whole dataset.
      std::set<std::int64_t> before_set(consumed.begin(), consumed.end());
      for (auto s : resumed) QVERIFY2(!before_set.count(s), qPrintable(QString("case %1 repeats %2").arg(i).arg(s)));
      QCOMPARE(static_cast<std::int64_t>(before_set.size() + resumed.size()), before.samples);
    }
  }

  void chunkRatiosUseLargestRemainder() {
    QVERIFY((splitByWeights(10, {1, 1, 1}) == std::vector<std::int64_t>{4, 3, 3}));
    QVERIFY((splitByWeights(10, {1, 1, 2}) == std::vector<std::int64_t>{3, 2, 5}));  // 2.5 2.5 5: tie to rank 0
    QVERIFY((splitByWeights(7, {0.5, 0.3, 0.2}) == std::vector<std::int64_t>{4, 2, 1}));  // 3.5 2.1 1.4
    QVERIFY((splitByWeights(3, {1000, 1, 1}) == std::vector<std::int64_t>{1, 1, 1}));  // every rank >= 1
    QVERIFY((splitByWeights(12, {1000, 1, 1}) == std::vector<std::int64_t>{10, 1, 1}));
    // Weights whose sum (or total x weight) passes the largest double: split as their ratios say
    // (these never returned: the quotas were NaN).
    QVERIFY((splitByWeights(10, {1e308, 1e308}) == std::vector<std::int64_t>{5, 5}));
    QVERIFY((splitByWeights(10, {1e308, 1e308, 1e308}) == std::vector<std::int64_t>{4, 3, 3}));
    QVERIFY((splitByWeights(4, {1e308, 1}) == std::vector<std::int64_t>{3, 1}));
    QVERIFY((splitByWeights(10, {1e-300, 3e-300}) == std::vector<std::int64_t>{3, 7}));
    std::mt19937_64 rng(3);
    for (int i = 0; i < 2000; ++i) {
      const int n = std::uniform_int_distribution<int>(1, 64)(rng);
      std::vector<double> w;
      for (int k = 0; k < n; ++k) w.push_back(std::uniform_real_distribution<double>(0.001, 10)(rng));
      const auto total = std::uniform_int_distribution<std::int64_t>(n, 5000)(rng);
      const auto sizes = splitByWeights(total, w);
      QCOMPARE(std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}), total);
      const double sum = std::accumulate(w.begin(), w.end(), 0.0);
      for (int k = 0; k < n; ++k) {
        QVERIFY(sizes[static_cast<std::size_t>(k)] >= 1);
        // Within one of the exact quota unless the >= 1 rule lifted it.
        QVERIFY(std::abs(static_cast<double>(sizes[static_cast<std::size_t>(k)]) - total * w[static_cast<std::size_t>(k)] / sum) <
                    1.0 + 1e-9 ||
                sizes[static_cast<std::size_t>(k)] == 1 || sizes[static_cast<std::size_t>(k)] < total * w[static_cast<std::size_t>(k)] / sum);
      }
    }
  }

  void elCheCountsAndEpochEndClamp() {
    QVERIFY((elCheCounts({10, 20}, 4) == std::vector<std::int64_t>{8, 4}));
    QVERIFY((elCheCounts({10, 10, 30}, 2) == std::vector<std::int64_t>{6, 6, 2}));
    QVERIFY((elCheCounts({1, 1000}, 1) == std::vector<std::int64_t>{1000, 1}));
    QVERIFY((clampElCheToRemaining({8, 4}, 100) == std::vector<std::int64_t>{8, 4}));   // fits: unchanged
    QVERIFY((clampElCheToRemaining({8, 4}, 6) == std::vector<std::int64_t>{4, 2}));     // scaled
    QVERIFY((clampElCheToRemaining({1, 1, 10}, 4) == std::vector<std::int64_t>{1, 1, 2}));  // overshoot trimmed
    QVERIFY((clampElCheToRemaining({5, 5}, 7) == std::vector<std::int64_t>{4, 3}));     // shortfall to rank 0
    QVERIFY(clampElCheToRemaining({5, 5, 5}, 2).empty());                              // fewer than devices: end
    std::mt19937_64 rng(11);
    for (int i = 0; i < 2000; ++i) {
      const int n = std::uniform_int_distribution<int>(1, 16)(rng);
      std::vector<std::int64_t> counts;
      for (int k = 0; k < n; ++k) counts.push_back(std::uniform_int_distribution<std::int64_t>(1, 50)(rng));
      const auto left = std::uniform_int_distribution<std::int64_t>(0, 400)(rng);
      const auto c = clampElCheToRemaining(counts, left);
      if (left < n) {
        QVERIFY(c.empty());
        continue;
      }
      const auto sum = std::accumulate(c.begin(), c.end(), std::int64_t{0});
      QVERIFY(sum <= left);
      QVERIFY(sum == std::min(left, std::accumulate(counts.begin(), counts.end(), std::int64_t{0})));
      for (auto x : c) QVERIFY(x >= 1);
    }
  }

  void elCheAdaptsToMeasuredTimesWithHysteresis() {
    // An anchor past a round's most batches: 2^62 wrapped the round's total, every share was 0
    // and the epoch never moved.
    for (const std::int64_t anchor : {std::int64_t{0}, kMaxBatchesPerRound + 1, std::int64_t{1} << 62}) {
      QVERIFY_THROWS_EXCEPTION(stoker::Error, ElChe(2, anchor));
      QVERIFY_THROWS_EXCEPTION(stoker::Error, elCheCounts({1.0, 2.0}, anchor));
    }
    QCOMPARE(elCheCounts({1.0, 2.0}, kMaxBatchesPerRound)[1], kMaxBatchesPerRound);
    ElChe el(3, 4);
    QVERIFY(!el.calibrated());
    el.calibrate();  // no readings yet: counts stay at the anchor
    QVERIFY((el.counts() == std::vector<std::int64_t>{4, 4, 4}));
    for (int i = 0; i < 5; ++i) {
      el.record(0, 40, 4);   // 10 ms per batch
      el.record(1, 80, 4);   // 20 ms
      el.record(2, 160, 8);  // 20 ms
    }
    el.record(0, -1, 4);  // ignored
    el.calibrate();
    QCOMPARE(el.anchorDevice(), 1);  // slowest, lowest index on a tie
    QVERIFY((el.counts() == std::vector<std::int64_t>{8, 4, 4}));
    // Device 2 becomes 5% slower: not enough to move the anchor or counts.
    for (int i = 0; i < 5; ++i) el.record(2, 84, 4);
    el.calibrate();
    QCOMPARE(el.anchorDevice(), 1);
    QVERIFY((el.counts() == std::vector<std::int64_t>{8, 4, 4}));
    // Device 2 becomes 50% slower: it is the new anchor.
    for (int i = 0; i < 5; ++i) el.record(2, 120, 4);
    el.calibrate();
    QCOMPARE(el.anchorDevice(), 2);
    QVERIFY((el.counts() == std::vector<std::int64_t>{12, 6, 4}));
  }

  void envIteratorSeedsPerDeviceAndIsDeterministic() {
    EnvBatchConfig c;
    c.datasetSize = 100;
    c.batchPerEnv = 4;
    c.envDevice = {0, 0, 1, 1, 1};  // uneven: 2 envs on device 0, 3 on device 1
    c.seed = 42;
    EnvBatchIterator a(c), b(c);
    a.startEpoch();
    b.startEpoch();
    QCOMPARE(a.length(), std::int64_t{100 / 12});  // the shortest device (window 12) bounds the epoch
    // Device 1's first window is randperm(100) from seed 42 + 1009 * 1.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(42 + 1009);
    const at::Tensor perm = at::randperm(100, gen, at::TensorOptions().dtype(at::kLong));
    const auto first = *a.next();
    QCOMPARE(first.size(), std::size_t(5));
    QCOMPARE(first[2].device, 1);
    QCOMPARE(first[2].indices, (std::vector<std::int64_t>{perm[0].item<std::int64_t>(), perm[1].item<std::int64_t>(),
                                                          perm[2].item<std::int64_t>(), perm[3].item<std::int64_t>()}));
    QCOMPARE(first[3].indices[0], perm[4].item<std::int64_t>());
    QVERIFY(first[0].indices != first[2].indices);  // devices draw independently
    int steps = 1;
    for (auto s = b.next(); s; s = b.next()) {
      if (steps == 1) {  // b's first step equals a's
        QCOMPARE((*s)[0].indices, first[0].indices);
      }
      ++steps;
    }
    QCOMPARE(steps - 1, 8);
    // A second epoch draws new permutations from the same generators.
    b.startEpoch();
    QVERIFY((*b.next())[0].indices != first[0].indices);
  }

  void envIteratorPartialBatchesAndContiguity() {
    EnvBatchConfig c;
    c.datasetSize = 10;
    c.batchPerEnv = 3;
    c.envDevice = {0, 0, 0};
    c.shuffle = false;
    c.dropLast = false;
    EnvBatchIterator it(c);
    QVERIFY2(stoker::test::expectBadInput([&] { it.next(); }, {"before startEpoch"}).isEmpty(), "iterated before init");
    it.startEpoch();
    QCOMPARE(it.length(), std::int64_t{2});  // ceil(10 / 9)
    it.next();
    const auto last = *it.next();  // one sample left: only env 0 gets data
    QCOMPARE(last.size(), std::size_t(1));
    QCOMPARE(last[0].env, 0);
    QCOMPARE(last[0].indices, std::vector<std::int64_t>{9});
    QVERIFY(!it.next());
    QVERIFY((splitWindowAmongEnvs({1, 2, 3, 4, 5}, 3) ==
             std::vector<std::vector<std::int64_t>>{{1, 2}, {3, 4}, {5}}));
    QVERIFY(stoker::test::expectError([] { checkEnvChunksContiguous({{1}, {}, {2}}); }, ErrorKind::Internal,
                                      {"non-contiguous batch", "env 2"})
                .isEmpty());
    c.dropLast = true;
    EnvBatchIterator dropped(c);
    dropped.startEpoch();
    QCOMPARE(dropped.length(), std::int64_t{1});
  }

  void shardFilesMapToLocalIndices() {
    PlanRequest r;
    r.shardSamples = {5, 0, 7};
    r.worldSize = 2;
    const auto p = makeShardPlan(r);
    QCOMPARE(p.samples, std::int64_t{12});
    QCOMPARE(p.shardOffsets, (std::vector<std::int64_t>{0, 5, 5}));
    QCOMPARE(locateSample(p.shardOffsets, 4), (std::pair<std::size_t, std::int64_t>{0, 4}));
    QCOMPARE(locateSample(p.shardOffsets, 5), (std::pair<std::size_t, std::int64_t>{2, 0}));  // skips the empty shard
    QCOMPARE(locateSample(p.shardOffsets, 11), (std::pair<std::size_t, std::int64_t>{2, 6}));
  }

  void badRequestsNameTheProblem() {
    auto bad = [](auto edit, QStringList parts) {
      PlanRequest r;
      r.samples = 100;
      r.worldSize = 4;
      r.batchSize = 8;
      edit(r);
      return expectBadInput([&] { makeShardPlan(r); }, parts);
    };
    QCOMPARE(bad([](PlanRequest& r) { r.weights = {1, 0, 1, 1}; }, {"weights", "rank 1", "positive"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.weights = {1, 1, -2, 1}; }, {"weights", "rank 2", "-2"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.weights = {1, 1, 1, std::nan("")}; }, {"weights", "rank 3", "finite"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.weights = {1, 1}; }, {"weights", "2 entries", "world size 4"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.worldSize = 0; }, {"world size", "at least 1", "got 0"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.dropLast = true, r.batchSize = 26; }, {"batch size", "26", "25 samples", "drop_last"}),
             QString());
    QCOMPARE(bad([](PlanRequest& r) { r.dropLast = true, r.weights = {1, 1, 1, 1}, r.batchSize = 26; },
                 {"batch size", "drop_last"}),
             QString());
    QCOMPARE(bad([](PlanRequest& r) { r.resumeFrom = 101; }, {"resume point", "101", "beyond", "100 samples"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.resumeFrom = -1; }, {"resume point"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.samples = 0; }, {"samples", "at least 1"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.shardSamples = {10, -1}; r.samples = 0; }, {"shard 1", "negative"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.shardSamples = {10, 20}; }, {"samples", "100", "30"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.stepMs = {1, 2, 0, 4}; }, {"step times", "device 2"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.stepMs = {1, 2}; }, {"step times", "2 entries"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.stepMs = {1, 2, 3, 4}, r.weights = {1, 1, 1, 1}; }, {"not both"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.weights = {1, 1, 1, 1}, r.batchSize = 0; }, {"batch size"}), QString());
    QCOMPARE(bad([](PlanRequest& r) { r.stepMs = {1, 1, 1, 1}, r.anchorBatches = 0; }, {"anchor"}), QString());
    // The loader's own rank check (shard_rank >= shard_world_size).
    QVERIFY(expectBadInput([] { distributedIndices({10, 4, 4, true, 0, false}, 0); }, {"rank 4", "0-3"}).isEmpty());
  }

  void cliPrintsTheJsonContractAndIsDeterministicAcrossProcesses() {
    const QStringList args = {"plan", "--samples", "1003", "--world-size", "4", "--seed", "9", "--epoch", "2",
                              "--batch-size", "32", "--json"};
    const auto a = stoker::test::runStoker(args);
    const auto b = stoker::test::runStoker(args);
    QVERIFY2(a.exitCode == 0, a.err.constData());
    QCOMPARE(a.out, b.out);  // two processes, one plan
    const QJsonObject doc = QJsonDocument::fromJson(a.out).object();
    QCOMPARE(doc["policy"].toString(), QString("torch"));
    QCOMPARE(doc["ranks"].toArray().size(), 4);
    PlanRequest r;
    r.samples = 1003, r.worldSize = 4, r.seed = 9, r.epoch = 2, r.batchSize = 32;
    const auto plan = makeShardPlan(r);
    for (int k = 0; k < 4; ++k) {
      const QJsonObject rank = doc["ranks"].toArray()[k].toObject();
      QCOMPARE(rank["rank"].toInt(), k);
      QVERIFY(toVector(rank["indices"].toArray()) == plan.ranks[static_cast<std::size_t>(k)].indices);
      QCOMPARE(rank["step_sizes"].toArray().size(), 8);  // ceil(251 / 32)
    }
    // --rank prints one rank; --no-indices drops the lists.
    const auto one = stoker::test::runStoker({"plan", "--samples", "1003", "--world-size", "4", "--seed", "9", "--epoch",
                                              "2", "--rank", "3", "--no-indices", "--json"});
    const QJsonArray ranks = QJsonDocument::fromJson(one.out).object()["ranks"].toArray();
    QCOMPARE(ranks.size(), 1);
    QCOMPARE(ranks[0].toObject()["rank"].toInt(), 3);
    QVERIFY(!ranks[0].toObject().contains("indices"));
    // The table names the policy and every rank.
    const auto table = stoker::test::runStoker({"plan", "--samples", "100", "--world-size", "2", "--weights", "3,1",
                                                "--batch-size", "4"});
    QVERIFY2(table.exitCode == 0, table.err.constData());
    QVERIFY(table.out.contains("weighted plan: 100 samples, world size 2"));
    QVERIFY(table.out.contains("planned in"));
  }

  // A resumed epoch whose rest makes no whole step with drop_last (a state saved after its last
  // step) is over: no step, the rest dropped -- not "batch size 16 is larger than the 4 samples".
  void resumedRestWithoutAWholeStepPlansNoStep() {
    for (const QStringList& policy : {QStringList{"--weights", "1,1"}, QStringList{"--step-ms", "10,20"}, QStringList{}}) {
      const auto r = stoker::test::runStoker(QStringList{"plan", "--samples", "100", "--world-size", "2", "--batch-size",
                                                         "16", "--drop-last", "--resume-from", "96", "--json"} + policy);
      QVERIFY2(r.exitCode == 0, qPrintable(policy.join(' ') + ": " + r.err));
      const QJsonObject plan = QJsonDocument::fromJson(r.out).object();
      QCOMPARE(plan["steps"].toInt(), 0);
      if (!policy.isEmpty()) QCOMPARE(plan["dropped"].toInt(), 4);  // the split's rest is dropped whole
    }
  }

  // Step times far apart (1e-300 ms against 1 ms): the fast rank gets the most batches a round,
  // held to 2^20 (llround overflowed and gave it 1, the slow rank its 4).
  void elCheWithExtremeStepTimesStaysTheRightWayRound() {
    const auto r = stoker::test::runStoker({"plan", "--samples", "1000", "--world-size", "2", "--batch-size", "4",
                                            "--step-ms", "1e-300,1", "--no-indices", "--json"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonArray ranks = QJsonDocument::fromJson(r.out).object()["ranks"].toArray();
    QCOMPARE(ranks[0].toObject()["batches_per_round"].toInteger(), qint64(1) << 20);
    QCOMPARE(ranks[1].toObject()["batches_per_round"].toInteger(), qint64(4));  // the anchor (slowest): 4 a round
  }

  // Weights of 1e308 (their sum is inf) split as their ratios say; the run ended only when killed.
  // One rank's plan (--rank) still says the world it is a rank of.
  void cliPlansExtremeWeightsAndOneRank() {
    const auto r = stoker::test::runStoker({"plan", "--samples", "10", "--world-size", "2", "--batch-size", "2",
                                            "--weights", "1e308,1e308", "--no-indices", "--json"});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject plan = QJsonDocument::fromJson(r.out).object();
    QCOMPARE(plan["ranks"].toArray()[0].toObject()["samples"].toInteger(), qint64(5));
    const auto one = stoker::test::runStoker({"plan", "--samples", "10", "--world-size", "4", "--rank", "2", "--json"});
    QVERIFY2(one.exitCode == 0, one.err.constData());
    const QJsonObject onePlan = QJsonDocument::fromJson(one.out).object();
    QCOMPARE(onePlan["world_size"].toInt(), 4);
    QCOMPARE(onePlan["ranks"].toArray().size(), 1);
    QCOMPARE(onePlan["ranks"].toArray()[0].toObject()["rank"].toInt(), 2);
  }

  void cliRefusesBadInputWithOneLine() {
    const QList<QPair<QStringList, QString>> cases = {
        {{"--world-size", "0"}, "world size: must be at least 1"},
        {{"--world-size", "2", "--rank", "2"}, "--rank: 2 is not a rank of world size 2"},
        {{"--world-size", "2", "--weights", "1,0", "--batch-size", "2"}, "rank 1 has weight 0"},
        {{"--world-size", "2", "--weights", "1,-3", "--batch-size", "2"}, "rank 1 has weight -3"},
        {{"--world-size", "2", "--weights", "nan,1", "--batch-size", "2"}, "rank 0 has a weight that is not a finite"},
        {{"--world-size", "2", "--weights", "1,1,1", "--batch-size", "2"}, "3 entries for world size 2"},
        {{"--world-size", "2", "--batch-size", "6", "--drop-last"}, "batch size: 6 is larger than the 5 samples"},
        {{"--world-size", "2", "--resume-from", "11"}, "resume point: 11 is beyond the epoch's 10 samples"},
        {{"--world-size", "4", "--batch-size", "4611686018427387905", "--weights", "1,1,1,1"},
         "times the world size 4 overflows"},
        {{"--world-size", "1", "--shard-samples", "9223372036854775807,9223372036854775807,3"}, "add up past 2^63-1"},
        {{"--world-size", "2147483647"}, "world size: 2147483647 is more ranks than a plan holds"},
        {{"--world-size", "2", "--anchor-batches", "0"}, "--anchor-batches: used only with --step-ms"},
        {{"--world-size", "2", "--batch-size", "2", "--step-ms", "1,2", "--anchor-batches", "4611686018427387904"},
         "anchor batches: must be 1 to 1048576"},
    };
    for (const auto& [extra, message] : cases) {
      const auto r = stoker::test::runStoker(QStringList{"plan", "--samples", "10"} + extra);
      QVERIFY2(r.exitCode == 2, qPrintable(extra.join(' ') + ": exit " + QString::number(r.exitCode)));
      QVERIFY2(r.err.startsWith("error: ") && r.err.contains(message.toUtf8()) && r.err.count('\n') == 1,
               qPrintable(extra.join(' ') + ": " + r.err));
    }
  }
};

QTEST_GUILESS_MAIN(TestPlanner)
#include "tst_planner.moc"
