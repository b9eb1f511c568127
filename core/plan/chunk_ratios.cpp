#include "plan/chunk_ratios.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>

#include "util/error.h"

namespace stoker {
namespace {
std::string shortNumber(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
}  // namespace

void validateRankWeights(const std::vector<double>& weights, int worldSize) {
  if (static_cast<int>(weights.size()) != worldSize)
    throwBadInput("weights", "has " + std::to_string(weights.size()) + " entries for world size " +
                                 std::to_string(worldSize) + " (one per rank)");
  for (std::size_t r = 0; r < weights.size(); ++r) {
    const double w = weights[r];
    if (std::isnan(w) || std::isinf(w))
      throwBadInput("weights", "rank " + std::to_string(r) + " has a weight that is not a finite number");
    if (w <= 0)
      throwBadInput("weights", "rank " + std::to_string(r) + " has weight " + shortNumber(w) +
                                   ": every rank needs a positive weight");
  }
}

std::vector<std::int64_t> splitByWeights(std::int64_t total, const std::vector<double>& weights) {
  const auto n = static_cast<std::int64_t>(weights.size());
  if (n == 0) throwBadInput("weights", "no ranks to split among");
  if (total < n)
    throwBadInput("split", "cannot give each of " + std::to_string(n) + " ranks at least one of " +
                               std::to_string(total) + " samples");
  // Relative to the largest weight (each in (0, 1]): weights of 1e308 summed to inf, the quotas
  // became NaN, and the loop below that hands out the rest never ended.
  const double largest = *std::max_element(weights.begin(), weights.end());
  double sum = 0;
  for (double w : weights) sum += w / largest;
  std::vector<double> quota(weights.size());
  std::vector<std::int64_t> sizes(weights.size());
  std::int64_t given = 0;
  for (std::size_t r = 0; r < weights.size(); ++r) {
    quota[r] = static_cast<double>(total) * (weights[r] / largest / sum);
    const double whole = std::floor(quota[r]);
    sizes[r] = whole >= static_cast<double>(total) ? total : static_cast<std::int64_t>(whole);
    given += sizes[r];
  }
  // Floors can overshoot by rounding error only when quotas are whole; trim.
  for (std::size_t r = weights.size(); given > total && r-- > 0;)
    if (sizes[r] > 0) --sizes[r], --given;
  std::vector<std::size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return quota[a] - static_cast<double>(sizes[a]) > quota[b] - static_cast<double>(sizes[b]);
  });
  for (std::size_t i = 0; given < total; i = (i + 1) % order.size()) ++sizes[order[i]], ++given;
  // Every rank works each step: a rank rounded to 0 takes one sample from
  // the rank that is furthest above its quota and can spare one.
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > 0) continue;
    std::size_t donor = sizes.size();
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 2) continue;
      if (donor == sizes.size() ||
          static_cast<double>(sizes[d]) - quota[d] > static_cast<double>(sizes[donor]) - quota[donor])
        donor = d;
    }
    --sizes[donor];
    ++sizes[r];
  }
  return sizes;
}

std::vector<std::int64_t> splitLastStep(std::int64_t samples, const std::vector<double>& weights) {
  if (samples >= static_cast<std::int64_t>(weights.size())) return splitByWeights(samples, weights);
  return std::vector<std::int64_t>(weights.size(), 1);
}

}  // namespace stoker
