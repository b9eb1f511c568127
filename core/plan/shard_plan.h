// plan/shard_plan: who gets which samples in one epoch, as a pure,
// deterministic function of the request (same request, same plan, in any
// process). Three policies:
//  - torch: no weights, no step times. Exactly DistributedSampler's indices
//    (rank r takes positions r, r + W, ... of the epoch's order padded by
//    repeating from its start, or cut with drop_last).
//  - weighted: per-rank weights for unequal GPUs. Each step's global batch
//    (batch_size * W) is split by largest remainder, every rank >= 1.
//  - el_che: per-rank milliseconds per batch. Each round rank r runs
//    count_r whole batches (plan/el_che), clamped at the end of the epoch.
// The order and the dealing are the sampler's (data/sampler: epochOrder,
// dealInterleaved), so the loader's distributed sampler and the plan agree.
// A resume point K continues after the first K samples of the epoch's
// order (the order before it is dealt to ranks) on any world size: the
// remaining samples are dealt again, so none repeats or is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

struct PlanRequest {
  std::int64_t samples = 0;
  // Optional: samples per shard file, in order; global index = offset of
  // the shard + local index. When set, `samples` must be 0 or their sum.
  std::vector<std::int64_t> shardSamples;
  int worldSize = 1;
  std::int64_t batchSize = 0;  // per rank; 0 = no per-step split (torch only)
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  bool shuffle = true;
  bool dropLast = false;
  std::vector<double> weights;   // weighted policy
  std::vector<double> stepMs;    // el_che policy: ms per batch per rank
  std::int64_t anchorBatches = 4;
  std::int64_t resumeFrom = 0;
};

struct RankPlan {
  int rank = 0;
  std::vector<std::int64_t> indices;  // in the order the rank consumes them
  std::int64_t padding = 0;           // entries of `indices` that repeat a sample
  std::vector<std::int64_t> stepSizes;  // samples per step (el_che: per round)
  std::int64_t batchesPerRound = 0;     // el_che only
};

struct ShardPlan {
  std::string policy;         // "torch", "weighted" or "el_che"
  std::int64_t samples = 0;   // in the epoch
  std::int64_t resumeFrom = 0;
  std::int64_t remaining = 0;  // samples of the order after the resume point
  std::int64_t padding = 0;    // repeated entries added so ranks stay even
  std::int64_t dropped = 0;    // remaining samples no rank gets (drop_last)
  std::int64_t steps = 0;      // per-step splits (el_che: rounds)
  std::vector<std::int64_t> shardOffsets;  // first global index of each shard
  std::vector<RankPlan> ranks;
};

// Throws Error(BadInput) naming the field: world size < 1 or > kMaxWorldSize, samples < 1,
// bad shard counts, weights of the wrong count / zero / negative / NaN,
// bad step times, weights and step times together, a policy needing
// batch_size without one, batch larger than a rank's samples with
// drop_last, a resume point beyond the epoch.
void validatePlanRequest(const PlanRequest& request);

ShardPlan makeShardPlan(const PlanRequest& request);

// The weighted policy over an order the caller drew (the multi-device loader's sampler order):
// every step's batchSize x weights.size() samples split by `weights` as makeShardPlan splits them,
// then the short last step, or the tail dropped with dropLast. Weights as validateRankWeights takes.
ShardPlan planWeightedOver(const std::vector<std::int64_t>& order, std::int64_t batchSize,
                           const std::vector<double>& weights, bool dropLast);

// (shard, local index) of a global sample index given shard offsets.
std::pair<std::size_t, std::int64_t> locateSample(const std::vector<std::int64_t>& shardOffsets, std::int64_t index);

// {"policy", "samples", "seed", ..., "ranks": [{"rank", "indices",
// "step_sizes", ...}]}: the `stoker plan --json` contract; indices are
// omitted when !withIndices.
std::string shardPlanToJson(const PlanRequest& request, const ShardPlan& plan, bool withIndices = true);

}  // namespace stoker
