#include "plan/el_che.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace stoker {

namespace {

// Batches a round for a device `ratio` times the anchor's speed (times its batches), held to
// kMaxBatchesPerRound: times like 1e-300 against 1 made llround overflow (the fast device got 1
// batch, the wrong way round) and the clamp's count x remaining wrap.
std::int64_t batchesForRatio(double batches) {
  return std::max<std::int64_t>(1, std::llround(std::min(batches, static_cast<double>(kMaxBatchesPerRound))));
}

// The anchor's batches are a round's count too: 2^62 wrapped the round's total and every share
// became 0, and the epoch never moved (bench and feed ran until killed).
void requireAnchorBatches(std::int64_t anchorBatches) {
  if (anchorBatches < 1 || anchorBatches > kMaxBatchesPerRound)
    throwBadInput("anchor batches", "must be 1 to " + std::to_string(kMaxBatchesPerRound) + " (got " +
                                        std::to_string(anchorBatches) + ")");
}

}  // namespace

std::vector<std::int64_t> elCheCounts(const std::vector<double>& ms, std::int64_t anchorBatches) {
  if (ms.empty()) throwBadInput("step times", "no devices");
  requireAnchorBatches(anchorBatches);
  for (std::size_t d = 0; d < ms.size(); ++d)
    if (!(ms[d] > 0) || std::isinf(ms[d]))
      throwBadInput("step times", "device " + std::to_string(d) + " has a step time that is not a positive number");
  const double slowest = *std::max_element(ms.begin(), ms.end());
  std::vector<std::int64_t> counts(ms.size());
  for (std::size_t d = 0; d < ms.size(); ++d) counts[d] = batchesForRatio(static_cast<double>(anchorBatches) * slowest / ms[d]);
  return counts;
}

std::vector<std::int64_t> clampElCheToRemaining(std::vector<std::int64_t> counts, std::int64_t remaining) {
  const auto n = static_cast<std::int64_t>(counts.size());
  if (remaining < n) return {};
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  if (total <= remaining) return counts;
  for (auto& c : counts) c = std::max<std::int64_t>(1, c * remaining / total);
  std::int64_t sum = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  while (sum > remaining) {
    auto largest = std::max_element(counts.begin(), counts.end());
    if (*largest <= 1) break;  // cannot happen: remaining >= n
    --*largest;
    --sum;
  }
  for (std::size_t d = 0; sum < remaining && d < counts.size(); ++d) ++counts[d], ++sum;
  return counts;
}

std::vector<std::int64_t> elCheRoundShares(const std::vector<std::int64_t>& counts, std::int64_t left,
                                           std::int64_t batch, bool dropLast) {
  if (left <= 0) return {};
  auto round = clampElCheToRemaining(counts, left / batch);
  if (round.empty()) {
    // flodl ends the epoch here; without drop_last Stoker deals the rest.
    if (dropLast) return {};
    const auto ranks = static_cast<std::int64_t>(counts.size());
    return std::vector<std::int64_t>(counts.size(), (left + ranks - 1) / ranks);
  }
  for (auto& c : round) c *= batch;
  return round;
}

ElChe::ElChe(int devices, std::int64_t anchorBatches, std::size_t history)
    : anchorBatches_(anchorBatches), history_(std::max<std::size_t>(1, history)) {
  if (devices < 1) throwBadInput("El Che", "needs at least one device");
  requireAnchorBatches(anchorBatches);
  readings_.resize(static_cast<std::size_t>(devices));
  counts_.assign(static_cast<std::size_t>(devices), anchorBatches);
}

void ElChe::record(int device, double wallMs, std::int64_t batches) {
  if (device < 0 || device >= static_cast<int>(readings_.size()) || batches < 1) return;
  const double perBatch = wallMs / static_cast<double>(batches);
  if (!(perBatch > 0) || std::isinf(perBatch)) return;
  auto& r = readings_[static_cast<std::size_t>(device)];
  r.push_back(perBatch);
  if (r.size() > history_) r.pop_front();
}

std::vector<double> ElChe::msPerBatch() const {
  std::vector<double> ms;
  for (const auto& r : readings_)
    ms.push_back(r.empty() ? 0.0 : std::accumulate(r.begin(), r.end(), 0.0) / static_cast<double>(r.size()));
  return ms;
}

void ElChe::calibrate() {
  const auto ms = msPerBatch();
  if (std::any_of(ms.begin(), ms.end(), [](double m) { return m <= 0; })) return;
  const auto slowest = static_cast<int>(std::max_element(ms.begin(), ms.end()) - ms.begin());
  if (!calibrated_ || ms[static_cast<std::size_t>(slowest)] > 1.1 * ms[static_cast<std::size_t>(anchor_)]) anchor_ = slowest;
  // Counts relative to the anchor's time, so the anchor runs anchorBatches_.
  const double anchorMs = ms[static_cast<std::size_t>(anchor_)];
  for (std::size_t d = 0; d < ms.size(); ++d) {
    const auto target = batchesForRatio(static_cast<double>(anchorBatches_) * anchorMs / ms[d]);
    const double change = std::abs(static_cast<double>(target - counts_[d])) / static_cast<double>(counts_[d]);
    if (!calibrated_ || change > 0.05) counts_[d] = target;
  }
  calibrated_ = true;
}

}  // namespace stoker
