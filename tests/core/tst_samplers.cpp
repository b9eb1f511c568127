// Samplers: every seeded order equals what Debian's PyTorch draws for the
// same seed (DistributedSampler after set_epoch, RandomSampler and
// WeightedRandomSampler with a seeded generator), plus the properties users
// rely on: coverage, equal shares, padding and drop_last.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <set>

#include "data/sampler.h"
#include "test_support.h"

using namespace stoker;

namespace {

std::vector<std::int64_t> toVector(const QJsonArray& a) {
  std::vector<std::int64_t> v;
  for (const auto& x : a) v.push_back(x.toInteger());
  return v;
}

}  // namespace

class TestSamplers : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void distributedMatchesTorch() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    // (n, world, drop_last, shuffle, seed, epoch): uneven, fewer samples than ranks, big seeds.
    const QList<QList<qint64>> cases = {{10, 3, 0, 1, 0, 0},  {10, 3, 1, 1, 0, 0},    {10, 3, 0, 1, 7, 5},
                                        {2, 5, 0, 1, 1, 0},   {2, 5, 1, 1, 1, 0},     {1000, 8, 0, 1, 42, 3},
                                        {1001, 8, 1, 1, 42, 3}, {17, 4, 0, 0, 0, 0},  {17, 4, 1, 0, 0, 0},
                                        {60000, 7, 0, 1, 123456789, 11}};
    QByteArray error;
    const QByteArray torch = stoker::test::torchDistributedIndices(cases, &error);
    QVERIFY2(!torch.isEmpty(), error.constData());
    const QJsonArray expected = QJsonDocument::fromJson(torch).array();
    QCOMPARE(expected.size(), cases.size());
    for (int i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      for (int rank = 0; rank < c[1]; ++rank) {
        DistributedSamplerConfig cfg{c[0], rank, static_cast<int>(c[1]), c[3] != 0, static_cast<std::uint64_t>(c[4]), c[2] != 0};
        const auto mine = distributedIndices(cfg, c[5]);
        QVERIFY2(mine == toVector(expected[i].toArray()[rank].toArray()),
                 qPrintable(QString("case %1 rank %2").arg(i).arg(rank)));
        QCOMPARE(static_cast<qint64>(mine.size()), distributedSamplesPerRank(cfg));
      }
    }
  }

  void randomAndWeightedMatchTorch() {
    QVERIFY2(stoker::test::pythonTorchAvailable(), "Debian's python3-torch is needed");
    const QString script = R"(
import json, torch
from torch.utils.data import RandomSampler, WeightedRandomSampler
g = lambda s: torch.Generator().manual_seed(s)
print(json.dumps({
  "perm": list(RandomSampler(range(1000), generator=g(5 + 2))),
  "repl": list(RandomSampler(range(50), replacement=True, num_samples=77, generator=g(9))),
  "weighted": list(WeightedRandomSampler([0.1, 0.0, 3.0, 1.0, 0.5], 40, replacement=True, generator=g(11))),
}))
)";
    auto r = stoker::test::runPython(script);
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject expected = QJsonDocument::fromJson(r.out).object();
    QVERIFY(randomPermutation(1000, 7) == toVector(expected["perm"].toArray()));
    QVERIFY(randomWithReplacement(50, 77, 9) == toVector(expected["repl"].toArray()));
    QVERIFY(weightedIndices({0.1, 0.0, 3.0, 1.0, 0.5}, 40, true, 11) == toVector(expected["weighted"].toArray()));
  }

  void loaderOrderFollowsOptions() {
    LoaderOptions o;
    o.seed = 5;
    QVERIFY(epochIndices(o, 1000, 2) == randomPermutation(1000, 7));  // seed + epoch
    QVERIFY(epochIndices(o, 1000, 2) != epochIndices(o, 1000, 3));
    o.shuffle = false;
    QVERIFY(epochIndices(o, 10, 4) == sequentialIndices(10));
    o.sampler_type = SamplerType::Distributed;
    o.shuffle = true;
    o.shard_rank = 1;
    o.shard_world_size = 3;
    QVERIFY(epochIndices(o, 100, 1) == distributedIndices({100, 1, 3, true, 5, o.drop_last}, 1));
    o.sampler_type = SamplerType::Weighted;
    o.weights = {0, 1, 0, 1};
    o.num_samples = 200;
    for (auto i : epochIndices(o, 4, 0)) QVERIFY(i == 1 || i == 3);  // zero weights are never drawn
    // On 3 ranks the draw is dealt: rank r takes positions r, r + 3, ... of the one draw (padded
    // from its start to 67 each), so the shares differ and together are the draw; drop_last cuts it
    // to 66 each.
    o.drop_last = true;
    QCOMPARE(epochIndices(o, 4, 0).size(), std::size_t(66));
    o.drop_last = false;
    QCOMPARE(epochIndices(o, 4, 0).size(), std::size_t(67));
    for (SamplerType type : {SamplerType::Weighted, SamplerType::RandomWithReplacement}) {
      o.sampler_type = type;
      LoaderOptions whole = o;
      whole.shard_rank = 0;
      whole.shard_world_size = 1;
      const std::vector<std::int64_t> draw = epochIndices(whole, 4, 0);
      QCOMPARE(draw.size(), std::size_t(200));
      std::vector<std::vector<std::int64_t>> shares;
      for (int r = 0; r < 3; ++r) {
        o.shard_rank = r;
        shares.push_back(epochIndices(o, 4, 0));
        QCOMPARE(shares.back().size(), std::size_t(67));
      }
      for (std::size_t i = 0; i < 201; ++i) QCOMPARE(shares[i % 3][i / 3], draw[i % 200]);
      QVERIFY(shares[0] != shares[1]);
    }
  }

  void distributedSharesCoverTheDataset() {
    for (bool drop : {false, true}) {
      std::multiset<std::int64_t> all;
      for (int r = 0; r < 4; ++r) {
        auto mine = distributedIndices({103, r, 4, true, 1, drop}, 0);
        QCOMPARE(mine.size(), std::size_t(drop ? 25 : 26));
        all.insert(mine.begin(), mine.end());
      }
      std::set<std::int64_t> distinct(all.begin(), all.end());
      QCOMPARE(distinct.size(), std::size_t(drop ? 100 : 103));  // padding repeats, drop_last cuts
    }
  }
};

QTEST_GUILESS_MAIN(TestSamplers)
#include "tst_samplers.moc"
