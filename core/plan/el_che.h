// plan/el_che: how many batches each device runs per synchronisation round
// so that unequal GPUs finish the round together (flodl's "El Che"). The
// slowest device, the anchor, runs `anchorBatches`; a device twice as fast
// runs twice as many. Counts come from measured milliseconds per batch.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace stoker {

// Most batches a device runs in a round (the anchor's too).
inline constexpr std::int64_t kMaxBatchesPerRound = std::int64_t{1} << 20;

// count_d = max(1, round(anchorBatches * slowest_ms / ms_d)). Throws
// Error(BadInput) for an empty list, anchorBatches outside 1..kMaxBatchesPerRound, or a time that is
// not a positive finite number.

std::vector<std::int64_t> elCheCounts(const std::vector<double>& msPerBatch, std::int64_t anchorBatches);

// The counts for the last rounds of an epoch with `remainingBatches` left
// (flodl's clamp): an empty result when fewer batches remain than devices
// (the epoch ends there); otherwise counts scaled down to fit,
// max(1, floor(c * remaining / sum)), overshoot trimmed from the largest
// count above 1, and any shortfall added one per device in device order.
std::vector<std::int64_t> clampElCheToRemaining(std::vector<std::int64_t> counts, std::int64_t remainingBatches);

// Samples each rank takes in the next round with `left` samples of the
// epoch's order remaining: counts (clamped as above) x `batch`; once fewer
// whole batches than ranks remain, one last round dealing the rest evenly
// (ceil(left / ranks) each, the caller pads) -- or, with dropLast, nothing.
// Empty when the epoch is over. The planner, the multi-device loader and
// the multi-process job all schedule rounds with this.
std::vector<std::int64_t> elCheRoundShares(const std::vector<std::int64_t>& counts, std::int64_t left,
                                           std::int64_t batch, bool dropLast);

// Adapts counts from measurements as the loader runs: each device's time is
// the mean of its last `history` readings, the anchor is the slowest device
// (kept unless another is more than 10% slower, so noise does not flip it),
// and a device's count changes only when it moves by more than 5%.
class ElChe {
 public:
  ElChe(int devices, std::int64_t anchorBatches, std::size_t history = 5);

  // One round's measurement on `device`: `wallMs` for `batches` batches.
  // Non-positive or non-finite readings are ignored.
  void record(int device, double wallMs, std::int64_t batches);
  // Recomputes the counts once every device has at least one reading.
  void calibrate();

  const std::vector<std::int64_t>& counts() const { return counts_; }
  int anchorDevice() const { return anchor_; }
  std::vector<double> msPerBatch() const;
  bool calibrated() const { return calibrated_; }

 private:
  std::int64_t anchorBatches_;
  std::size_t history_;
  std::vector<std::deque<double>> readings_;
  std::vector<std::int64_t> counts_;
  int anchor_ = 0;
  bool calibrated_ = false;
};

}  // namespace stoker
