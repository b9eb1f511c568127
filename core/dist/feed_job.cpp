#include "dist/feed_job.h"

#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "data/sampler.h"
#include "dist/dist_group.h"
#include "plan/chunk_ratios.h"
#include "plan/el_che.h"
#include "plan/shard_plan.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_number.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

std::string hex(std::uint64_t v) {
  char t[20];
  std::snprintf(t, sizeof t, "%016llx", static_cast<unsigned long long>(v));
  return t;
}

// One job-wide view: rank, world and the collectives (no-ops alone).
struct Ranks {
  DistGroup* group;
  int rank() const { return group ? group->rank() : 0; }
  int world() const { return group ? group->worldSize() : 1; }
  std::vector<double> exchange(double v) const { return group ? group->allgather(v) : std::vector<double>{v}; }
  void agree(const std::string& what, std::uint64_t digest) const {
    if (!group) return;
    const auto all = group->allgather(static_cast<std::int64_t>(digest));
    for (int r = 0; r < world(); ++r)
      if (static_cast<std::uint64_t>(all[static_cast<std::size_t>(r)]) != digest)
        throw Error(ErrorKind::Internal, what,
                    "rank " + std::to_string(r) + " computed a different plan (" + hex(static_cast<std::uint64_t>(all[static_cast<std::size_t>(r)])) +
                        " vs " + hex(digest) + "): are all ranks running the same options and dataset?");
  }
};

class Recorder {
 public:
  Recorder(const std::string& dir, int rank) {
    if (dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);  // an error shows when opening
    path_ = dir + "/rank" + std::to_string(rank) + ".txt";
    out_.open(path_, std::ios::app);
    if (!out_) throwIo(path_, "cannot open for appending", errno);
  }
  // Written before the step is committed: a killed rank's file may hold one
  // uncommitted step, which the progress file tells apart.
  void step(std::int64_t epoch, std::int64_t step, std::int64_t consumedBefore, const std::vector<Batch>& batches) {
    if (path_.empty()) return;
    out_ << epoch << ' ' << step << ' ' << consumedBefore;
    for (const auto& b : batches) {
      const auto* idx = b.indices.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < b.size(); ++i) out_ << ' ' << idx[i];
    }
    out_ << '\n';
    out_.flush();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

struct EpochRun {
  Loader& loader;
  const Ranks& ranks;
  const FeedJobOptions& o;
  const FeedStep& step;
  Recorder& recorder;
  std::int64_t samples;

  // Serves `batches` from the fed epoch, runs the step, exchanges its time.
  std::vector<double> runStep(Epoch& epoch, std::int64_t batches, std::int64_t e, std::int64_t s,
                              std::int64_t consumedBefore) {
    std::vector<Batch> mine;
    const auto start = Clock::now();
    for (std::int64_t b = 0; b < batches; ++b)
      if (auto batch = epoch.next()) mine.push_back(std::move(*batch));
    recorder.step(e, s, consumedBefore, mine);
    if (step) step(mine);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return ranks.exchange(batches > 0 ? ms / static_cast<double>(batches) : 0.0);  // also the commit point
  }
  void commit(std::int64_t e, std::int64_t consumed) {
    if (ranks.rank() == 0 && !o.progressFile.empty())
      writeFeedProgress(o.progressFile, {samples, o.seed, e, consumed, ranks.world(), o.shuffle, loader.dataset().description()});
  }

  FeedEpochReport planned(std::int64_t e, std::int64_t resumeFrom) {
    PlanRequest r;
    r.samples = samples, r.worldSize = ranks.world(), r.batchSize = o.batchSize, r.seed = o.seed, r.epoch = e;
    r.shuffle = o.shuffle, r.dropLast = o.dropLast, r.weights = o.weights, r.resumeFrom = resumeFrom;
    const ShardPlan plan = makeShardPlan(r);
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    for (const auto& rank : plan.ranks) {
      XXH3_64bits_update(h, rank.indices.data(), rank.indices.size() * sizeof(std::int64_t));
      XXH3_64bits_update(h, rank.stepSizes.data(), rank.stepSizes.size() * sizeof(std::int64_t));
    }
    const std::uint64_t digest = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    ranks.agree("plan of epoch " + std::to_string(e), digest);
    const RankPlan& mine = plan.ranks[static_cast<std::size_t>(ranks.rank())];
    FeedEpochReport report{e, resumeFrom, plan.steps, static_cast<std::int64_t>(mine.indices.size()), mine.padding,
                           hex(digest), {}};
    Epoch epoch = loader.openEpoch(e, static_cast<std::int64_t>(mine.indices.size()));
    std::int64_t at = 0;
    for (auto size : mine.stepSizes) {
      epoch.feed(mine.indices.data() + at, size, size);
      at += size;
    }
    epoch.closeFeed();
    // Steps consume a prefix of the remaining order: s * B * W samples
    // (torch) or the first s global batches (weighted).
    std::int64_t consumed = resumeFrom;
    for (std::int64_t s = 0; s < plan.steps; ++s) {
      std::int64_t stepSamples = 0;
      for (const auto& rank : plan.ranks) stepSamples += rank.stepSizes[static_cast<std::size_t>(s)];
      runStep(epoch, 1, e, s, consumed);
      consumed = std::min(samples, consumed + stepSamples);
      commit(e, consumed);
    }
    return report;
  }

  FeedEpochReport elChe(std::int64_t e, std::int64_t resumeFrom) {
    std::vector<std::int64_t> order = epochOrder(samples, o.seed, e, o.shuffle);
    order.erase(order.begin(), order.begin() + resumeFrom);
    const auto n = static_cast<std::int64_t>(order.size());
    const std::uint64_t digest = XXH3_64bits(order.data(), order.size() * sizeof(std::int64_t));
    ranks.agree("order of epoch " + std::to_string(e), digest);
    // Each rank works out the others' slices from these: a rank with another batch size took
    // samples another rank also took (the order alone agreed).
    const std::int64_t settings[] = {o.batchSize, o.anchorBatches, o.dropLast ? 1 : 0};
    ranks.agree("El Che's batch size, anchor batches and drop_last", XXH3_64bits(settings, sizeof settings));
    const int world = ranks.world(), me = ranks.rank();
    const std::int64_t bs = o.batchSize;
    FeedEpochReport report{e, resumeFrom, 0, 0, 0, hex(digest), {}};
    Epoch epoch = loader.openEpoch(e, n + bs * world);
    ElChe el(world, o.anchorBatches);
    std::int64_t cursor = 0;
    auto slice = [&](std::int64_t begin, std::int64_t count) {
      std::vector<std::int64_t> v(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = order[static_cast<std::size_t>((begin + i) % n)];
      if (count > 0) epoch.feed(v.data(), count, bs);
      report.samples += count;
      report.padding += std::max<std::int64_t>(0, std::min(count, begin + count - n));
    };
    for (auto share = elCheRoundShares(el.counts(), n - cursor, bs, o.dropLast); !share.empty();
         share = elCheRoundShares(el.counts(), n - cursor, bs, o.dropLast)) {
      const std::int64_t before = std::accumulate(share.begin(), share.begin() + me, std::int64_t{0});
      const std::int64_t total = std::accumulate(share.begin(), share.end(), std::int64_t{0});
      slice(cursor + before, share[static_cast<std::size_t>(me)]);
      const auto batches = (share[static_cast<std::size_t>(me)] + bs - 1) / bs;
      const auto msPerBatch = runStep(epoch, batches, e, report.steps, resumeFrom + cursor);
      for (int r = 0; r < world; ++r) {
        const auto rb = (share[static_cast<std::size_t>(r)] + bs - 1) / bs;
        el.record(r, msPerBatch[static_cast<std::size_t>(r)] * static_cast<double>(rb), rb);
      }
      el.calibrate();
      report.elCheCounts = el.counts();  // unclamped: what the measured times give
      cursor = std::min(n, cursor + total);
      ++report.steps;
      commit(e, resumeFrom + cursor);
    }
    epoch.closeFeed();
    return report;
  }
};

}  // namespace

FeedProgress readFeedProgress(const std::string& path) {
  std::ifstream in(path);
  if (!in) throwBadInput(path, "no progress file to resume from");
  try {
    const auto j = nlohmann::json::parse(in);
    FeedProgress p;
    auto integer = [&](const char* key, auto& out) {
      const auto v = jsonInteger<std::decay_t<decltype(out)>>(j.at(key));
      if (!v) throwBadInput(path, std::string("\"") + key + "\" is not an integer in range");
      out = *v;
    };
    integer("samples", p.samples);
    integer("seed", p.seed);
    integer("epoch", p.epoch);
    integer("consumed", p.consumed);
    integer("world_size", p.worldSize);
    if (j.contains("shuffle")) {
      if (!j["shuffle"].is_boolean()) throwBadInput(path, "\"shuffle\" is not true or false");
      p.shuffle = j["shuffle"].get<bool>();
    }
    if (j.contains("dataset")) {
      if (!j["dataset"].is_string()) throwBadInput(path, "\"dataset\" is not a string");
      p.dataset = j["dataset"].get<std::string>();
    }
    if (p.epoch < 0 || p.consumed < 0 || p.consumed > p.samples) throwBadInput(path, "progress values out of range");
    return p;
  } catch (const nlohmann::json::exception& e) {
    throwBadInput(path, std::string("not a stoker progress file: ") + e.what());
  }
}

void writeFeedProgress(const std::string& path, const FeedProgress& p) {
  nlohmann::json j{{"samples", p.samples}, {"seed", p.seed}, {"epoch", p.epoch}, {"consumed", p.consumed},
                   {"world_size", p.worldSize}};
  if (p.shuffle) j["shuffle"] = *p.shuffle;
  if (p.dataset) j["dataset"] = *p.dataset;
  const std::string text = j.dump() + "\n";
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

std::vector<FeedEpochReport> runFeedJob(Loader& loader, DistGroup* group, const FeedJobOptions& o, const FeedStep& step) {
  const Ranks ranks{group};
  if (o.epochs < 1) throwBadInput("epochs", "must be at least 1 (got " + std::to_string(o.epochs) + ")");
  // A rank's step is at most batch (torch, El Che) or batch x world (weights).
  const std::int64_t largestStep = o.weights.empty() ? o.batchSize : o.batchSize * ranks.world();
  if (o.batchSize < 1 || largestStep > loader.options().batch_size)
    throwBadInput("batch size", std::to_string(largestStep) + " per step does not fit the loader's batch_size " +
                                    std::to_string(loader.options().batch_size));
  if (o.elChe && !o.weights.empty()) throwBadInput("weights", "give either per-rank weights or El Che, not both");
  if (!o.weights.empty()) validateRankWeights(o.weights, ranks.world());
  if (o.resume && o.progressFile.empty()) throwBadInput("resume", "needs a progress file");
  const std::int64_t samples = loader.dataset().size();
  std::int64_t firstEpoch = 0, resumeFrom = 0;
  if (o.resume) {
    const FeedProgress p = readFeedProgress(o.progressFile);
    if (p.samples != samples || p.seed != o.seed)
      throwBadInput(o.progressFile, "is the progress of another job (" + std::to_string(p.samples) + " samples, seed " +
                                        std::to_string(p.seed) + "; this one has " + std::to_string(samples) +
                                        " samples, seed " + std::to_string(o.seed) + ")");
    if ((p.shuffle && *p.shuffle != o.shuffle) || (p.dataset && *p.dataset != loader.dataset().description()))
      throwBadInput(o.progressFile, "is the progress of another job (" +
                                        (p.shuffle && *p.shuffle != o.shuffle
                                             ? std::string(*p.shuffle ? "shuffled" : "not shuffled") + "; this one is " +
                                                   (o.shuffle ? "shuffled" : "not shuffled")
                                             : "over " + *p.dataset + "; this one is over " + loader.dataset().description()) +
                                        "): its count of consumed samples refers to another order");
    firstEpoch = p.epoch;
    resumeFrom = p.consumed;
    if (resumeFrom >= samples) ++firstEpoch, resumeFrom = 0;
  }
  Recorder recorder(o.recordDir, ranks.rank());
  EpochRun run{loader, ranks, o, step, recorder, samples};
  std::vector<FeedEpochReport> reports;
  for (std::int64_t e = firstEpoch; e < o.epochs; ++e) {
    const auto start = Clock::now();
    reports.push_back(o.elChe ? run.elChe(e, resumeFrom) : run.planned(e, resumeFrom));
    reports.back().seconds = std::chrono::duration<double>(Clock::now() - start).count();
    resumeFrom = 0;
    run.commit(e + 1, 0);
  }
  return reports;
}

}  // namespace stoker
