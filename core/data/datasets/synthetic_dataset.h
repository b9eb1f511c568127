// data/datasets/synthetic_dataset: synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]]: N samples of
// SHAPE (e.g. 3x32x32) with content derived from the index, plus an int64 label (index % 10).
// cost_us of busy CPU work per sample stands in for decoding; wait_us of sleep per sample for
// storage latency (a network file system, an object store), which frees the core, so more
// readers than cores still help.
#pragma once

#include "data/dataset.h"

namespace stoker {

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(std::int64_t n, std::vector<std::int64_t> shape, c10::ScalarType dtype, double costMicros,
                   double waitMicros = 0);
  std::string description() const override;
  std::int64_t size() const override { return n_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  double costMicros() const { return costMicros_; }
  double waitMicros() const { return waitMicros_; }

 private:
  std::int64_t n_;
  double costMicros_;
  double waitMicros_;
  std::vector<FieldSpec> specs_;
};

// Parses "synthetic:..." (throws Error(BadInput) naming the part that is wrong).
std::shared_ptr<SyntheticDataset> parseSyntheticSpec(const std::string& spec);

}  // namespace stoker
