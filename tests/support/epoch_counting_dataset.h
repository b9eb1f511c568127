// epoch_counting_dataset: a dataset of n int64 samples (each its own index) that counts the
// samples read for each epoch, so a test can see which epoch the workers are making and that no
// sample is read twice. For suites that link stoker_core.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoker::test {

// Counts the samples read for each epoch (the epoch the loader passes for transforms).
struct EpochCountingDataset : stoker::Dataset {
  explicit EpochCountingDataset(std::int64_t n) : n(n) {}
  std::int64_t n;
  std::vector<FieldSpec> specs{FieldSpec{"v", c10::ScalarType::Long, {}, 8}};
  mutable std::mutex m;
  mutable std::map<std::int64_t, std::int64_t> reads;  // epoch -> samples read
  std::string description() const override { return "epoch-counting"; }
  std::int64_t size() const override { return n; }
  const std::vector<FieldSpec>& fields() const override { return specs; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override { std::memcpy(dst[0], &index, 8); }
  void readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                   const ReadContext& context) const override {
    {
      std::lock_guard<std::mutex> lock(m);
      reads[context.epoch] += count;
    }
    readBatch(indices, count, dst);
  }
  std::int64_t readsOf(std::int64_t epoch) const {
    std::lock_guard<std::mutex> lock(m);
    auto it = reads.find(epoch);
    return it == reads.end() ? 0 : it->second;
  }
};

}  // namespace stoker::test
