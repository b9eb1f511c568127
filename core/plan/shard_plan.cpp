#include "plan/shard_plan.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data/sampler.h"
#include "plan/chunk_ratios.h"
#include "plan/el_che.h"
#include "util/error.h"

namespace stoker {
namespace {

// Refuses shard counts whose sum passes 2^63-1 (it wrapped into a plan of 1 sample with a shard at
// offset -2); the counts are checked non-negative first.
std::int64_t totalSamples(const PlanRequest& r) {
  if (r.shardSamples.empty()) return r.samples;
  std::int64_t sum = 0;
  for (std::int64_t s : r.shardSamples)
    if (__builtin_add_overflow(sum, s, &sum)) throwBadInput("shards", "their sample counts add up past 2^63-1");
  return sum;
}

std::string str(std::int64_t v) { return std::to_string(v); }

// Appends `count` entries of `from` starting at `*at` to `rank`, wrapping to
// the start of `from` for padding (counted in `rank.padding`).
void take(const std::vector<std::int64_t>& from, std::int64_t* at, std::int64_t count, RankPlan& rank) {
  const auto n = static_cast<std::int64_t>(from.size());
  for (std::int64_t i = 0; i < count; ++i, ++*at) {
    if (*at >= n) ++rank.padding;
    rank.indices.push_back(from[static_cast<std::size_t>(*at % n)]);
  }
}

void planTorch(const PlanRequest& r, const std::vector<std::int64_t>& order, ShardPlan& plan) {
  auto dealt = dealInterleaved(order, r.worldSize, r.dropLast, &plan.padding, &plan.dropped);
  const std::int64_t perRank = dealt.empty() ? 0 : static_cast<std::int64_t>(dealt[0].size());
  const std::int64_t realPerRankFloor = static_cast<std::int64_t>(order.size()) / r.worldSize;
  for (int k = 0; k < r.worldSize; ++k) {
    RankPlan& rank = plan.ranks[static_cast<std::size_t>(k)];
    rank.indices = std::move(dealt[static_cast<std::size_t>(k)]);
    // Padding fills the last position of the ranks past the real samples.
    const std::int64_t real = realPerRankFloor + (k < static_cast<int>(order.size() % r.worldSize) ? 1 : 0);
    rank.padding = std::max<std::int64_t>(0, perRank - real);
    if (r.batchSize > 0) {
      for (std::int64_t at = 0; at < perRank; at += r.batchSize) {
        const std::int64_t size = std::min(r.batchSize, perRank - at);
        if (r.dropLast && size < r.batchSize) break;
        rank.stepSizes.push_back(size);
      }
    }
  }
  plan.steps = plan.ranks.empty() ? 0 : static_cast<std::int64_t>(plan.ranks[0].stepSizes.size());
}

void planWeighted(const PlanRequest& r, const std::vector<std::int64_t>& order, ShardPlan& plan) {
  const std::int64_t global = r.batchSize * r.worldSize;
  const auto n = static_cast<std::int64_t>(order.size());
  const auto sizes = splitByWeights(global, r.weights);
  std::int64_t at = 0;
  for (; at + global <= n; ++plan.steps)
    for (int k = 0; k < r.worldSize; ++k) {
      auto& rank = plan.ranks[static_cast<std::size_t>(k)];
      take(order, &at, sizes[static_cast<std::size_t>(k)], rank);
      rank.stepSizes.push_back(sizes[static_cast<std::size_t>(k)]);
    }
  const std::int64_t tail = n - at;
  if (tail == 0) return;
  if (r.dropLast) {
    plan.dropped = tail;
    return;
  }
  // A short last step: split by the same weights, or one sample each
  // (padded from the start of the order) when fewer than W remain.
  const auto last = splitLastStep(tail, r.weights);
  for (int k = 0; k < r.worldSize; ++k) {
    auto& rank = plan.ranks[static_cast<std::size_t>(k)];
    take(order, &at, last[static_cast<std::size_t>(k)], rank);
    rank.stepSizes.push_back(last[static_cast<std::size_t>(k)]);
  }
  ++plan.steps;
  for (const auto& rank : plan.ranks) plan.padding += rank.padding;
}

void planElChe(const PlanRequest& r, const std::vector<std::int64_t>& order, ShardPlan& plan) {
  const auto counts = elCheCounts(r.stepMs, r.anchorBatches);
  for (int k = 0; k < r.worldSize; ++k) plan.ranks[static_cast<std::size_t>(k)].batchesPerRound = counts[static_cast<std::size_t>(k)];
  const auto n = static_cast<std::int64_t>(order.size());
  std::int64_t at = 0;
  for (auto shares = elCheRoundShares(counts, n - at, r.batchSize, r.dropLast); !shares.empty();
       shares = elCheRoundShares(counts, n - at, r.batchSize, r.dropLast)) {
    for (int k = 0; k < r.worldSize; ++k) {
      auto& rank = plan.ranks[static_cast<std::size_t>(k)];
      take(order, &at, shares[static_cast<std::size_t>(k)], rank);  // the last round wraps: padding
      rank.stepSizes.push_back(shares[static_cast<std::size_t>(k)]);
    }
    ++plan.steps;
  }
  plan.dropped = std::max<std::int64_t>(0, n - at);  // drop_last's tail
  for (const auto& rank : plan.ranks) plan.padding += rank.padding;
}

}  // namespace

void validatePlanRequest(const PlanRequest& r) {
  if (r.worldSize < 1) throwBadInput("world size", "must be at least 1 (got " + std::to_string(r.worldSize) + ")");
  // The plan holds a record per rank: 2^31-1 ranks asked for ~100 GiB and ended in "out of memory".
  if (r.worldSize > kMaxWorldSize)
    throwBadInput("world size", std::to_string(r.worldSize) + " is more ranks than a plan holds (at most " +
                                    std::to_string(kMaxWorldSize) + ")");
  for (std::size_t s = 0; s < r.shardSamples.size(); ++s)
    if (r.shardSamples[s] < 0) throwBadInput("shard " + std::to_string(s), "has a negative sample count");
  const std::int64_t n = totalSamples(r);
  if (!r.shardSamples.empty() && r.samples != 0 && r.samples != n)
    throwBadInput("samples", str(r.samples) + " does not match the shards' " + str(n));
  if (n < 1) throwBadInput("samples", "must be at least 1 (got " + str(n) + ")");
  if (r.batchSize < 0) throwBadInput("batch size", "must be at least 1 (got " + str(r.batchSize) + ")");
  if (r.resumeFrom < 0) throwBadInput("resume point", "must be 0 or more (got " + str(r.resumeFrom) + ")");
  if (r.resumeFrom > n)
    throwBadInput("resume point", str(r.resumeFrom) + " is beyond the epoch's " + str(n) + " samples");
  if (!r.weights.empty() && !r.stepMs.empty())
    throwBadInput("weights", "give either per-rank weights or per-rank step times, not both");
  const std::int64_t remaining = n - r.resumeFrom;
  if (!r.weights.empty()) {
    validateRankWeights(r.weights, r.worldSize);
    if (r.batchSize < 1) throwBadInput("batch size", "weights split each step's batch: give a batch size");
  }
  if (!r.stepMs.empty()) {
    if (static_cast<int>(r.stepMs.size()) != r.worldSize)
      throwBadInput("step times", "has " + std::to_string(r.stepMs.size()) + " entries for world size " +
                                      std::to_string(r.worldSize) + " (one per rank)");
    elCheCounts(r.stepMs, r.anchorBatches);  // validates the times and the anchor
    if (r.batchSize < 1) throwBadInput("batch size", "El Che counts whole batches: give a batch size");
  }
  if (r.batchSize > std::numeric_limits<std::int64_t>::max() / std::max(r.worldSize, 1))
    throwBadInput("batch size", str(r.batchSize) + " times the world size " + std::to_string(r.worldSize) + " overflows");
  // A resumed epoch whose rest makes no whole batch is over (a state saved after its last step):
  // it plans no step. Only a fresh epoch that would serve nothing is a mistake.
  if (r.dropLast && r.batchSize > 0 && r.resumeFrom == 0) {
    const bool torch = r.weights.empty() && r.stepMs.empty();
    const std::int64_t perRank = remaining / r.worldSize;
    const std::int64_t needed = torch ? r.batchSize : r.batchSize * r.worldSize;
    const std::int64_t have = torch ? perRank : remaining;
    if (needed > have)
      throwBadInput("batch size", str(r.batchSize) + " is larger than the " + str(have) +
                                      (torch ? " samples each rank gets" : " samples left in the epoch") +
                                      ": with drop_last no batch would be served");
  }
}

std::pair<std::size_t, std::int64_t> locateSample(const std::vector<std::int64_t>& offsets, std::int64_t index) {
  auto it = std::upper_bound(offsets.begin(), offsets.end(), index);
  if (it == offsets.begin()) throwBadInput("sample " + str(index), "is before the first shard");
  const auto shard = static_cast<std::size_t>(it - offsets.begin() - 1);
  return {shard, index - offsets[shard]};
}

ShardPlan makeShardPlan(const PlanRequest& r) {
  validatePlanRequest(r);
  ShardPlan plan;
  plan.samples = totalSamples(r);
  plan.resumeFrom = r.resumeFrom;
  std::int64_t offset = 0;
  for (auto s : r.shardSamples) plan.shardOffsets.push_back(offset), offset += s;
  auto order = epochOrder(plan.samples, r.seed, r.epoch, r.shuffle);
  order.erase(order.begin(), order.begin() + r.resumeFrom);
  plan.remaining = static_cast<std::int64_t>(order.size());
  plan.ranks.resize(static_cast<std::size_t>(r.worldSize));
  for (int k = 0; k < r.worldSize; ++k) plan.ranks[static_cast<std::size_t>(k)].rank = k;
  if (!r.weights.empty()) {
    plan.policy = "weighted";
    planWeighted(r, order, plan);
  } else if (!r.stepMs.empty()) {
    plan.policy = "el_che";
    planElChe(r, order, plan);
  } else {
    plan.policy = "torch";
    planTorch(r, order, plan);
  }
  return plan;
}

ShardPlan planWeightedOver(const std::vector<std::int64_t>& order, std::int64_t batchSize,
                           const std::vector<double>& weights, bool dropLast) {
  PlanRequest r;
  r.worldSize = static_cast<int>(weights.size());
  r.batchSize = batchSize;
  r.weights = weights;
  r.dropLast = dropLast;
  ShardPlan plan;
  plan.policy = "weighted";
  plan.samples = plan.remaining = static_cast<std::int64_t>(order.size());
  plan.ranks.resize(weights.size());
  for (int k = 0; k < r.worldSize; ++k) plan.ranks[static_cast<std::size_t>(k)].rank = k;
  planWeighted(r, order, plan);
  return plan;
}

std::string shardPlanToJson(const PlanRequest& r, const ShardPlan& plan, bool withIndices) {
  nlohmann::json j = {{"policy", plan.policy},     {"samples", plan.samples},        {"world_size", r.worldSize},
                      {"seed", r.seed},            {"epoch", r.epoch},               {"shuffle", r.shuffle},
                      {"drop_last", r.dropLast},   {"batch_size", r.batchSize},      {"resume_from", plan.resumeFrom},
                      {"remaining", plan.remaining}, {"padding", plan.padding},      {"dropped", plan.dropped},
                      {"steps", plan.steps}};
  if (!r.weights.empty()) j["weights"] = r.weights;
  if (!r.stepMs.empty()) j["step_ms"] = r.stepMs, j["anchor_batches"] = r.anchorBatches;
  if (!plan.shardOffsets.empty()) {
    nlohmann::json shards = nlohmann::json::array();
    for (std::size_t s = 0; s < plan.shardOffsets.size(); ++s) {
      const std::int64_t end = s + 1 < plan.shardOffsets.size() ? plan.shardOffsets[s + 1] : plan.samples;
      shards.push_back({{"shard", s}, {"first", plan.shardOffsets[s]}, {"samples", end - plan.shardOffsets[s]}});
    }
    j["shards"] = std::move(shards);
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : plan.ranks) {
    nlohmann::json jr = {{"rank", rank.rank},
                         {"samples", rank.indices.size()},
                         {"padding", rank.padding},
                         {"step_sizes", rank.stepSizes}};
    if (plan.policy == "el_che") jr["batches_per_round"] = rank.batchesPerRound;
    if (withIndices) jr["indices"] = rank.indices;
    ranks.push_back(std::move(jr));
  }
  j["ranks"] = std::move(ranks);
  return j.dump();
}

}  // namespace stoker
