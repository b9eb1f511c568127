// plan/chunk_ratios: splitting a count among ranks in proportion to weights
// (unequal GPUs). Largest-remainder rounding keeps the split as close to
// the weights as integers allow, and every rank gets at least one sample so
// no GPU ever idles through a step.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker {

// Throws Error(BadInput) naming the problem when `weights` cannot describe
// `worldSize` ranks: wrong count, zero, negative, NaN or infinite entries.
void validateRankWeights(const std::vector<double>& weights, int worldSize);

// Sizes summing to `total`: floor(total * w_r / sum(w)), the leftover one
// at a time to the largest fractional parts (ties to the lower rank), then
// any rank left at 0 takes one from the rank most above its quota.
// Needs total >= weights.size() (Error(BadInput) otherwise).
std::vector<std::int64_t> splitByWeights(std::int64_t total, const std::vector<double>& weights);

// A short last step of `samples`: split by weights, or one each (the caller
// pads from the start of the order) when fewer samples remain than ranks.
std::vector<std::int64_t> splitLastStep(std::int64_t samples, const std::vector<double>& weights);

}  // namespace stoker
