// tests/fuzz/fuzz_read_samples: what the image-dataset fuzz targets do with a dataset they opened
// -- read each sample (the first 64) as a loader worker reads it, into slots of its fields' sizes.
// A bad sample refused with Error(BadInput) is expected (skip_bad_samples keeps them); the next
// one still reads.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "util/error.h"

namespace stoker::fuzz {

inline void readEachSample(const Dataset& dataset) {
  std::vector<std::vector<std::uint8_t>> slots;
  std::vector<std::uint8_t*> dst;
  for (const auto& f : dataset.fields()) slots.emplace_back(static_cast<std::size_t>(f.sampleBytes));
  for (auto& s : slots) dst.push_back(s.data());
  for (std::int64_t i = 0; i < dataset.size() && i < 64; ++i) {
    try {
      dataset.readItem(i, dst.data());
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BadInput) throw;
    }
  }
}

}  // namespace stoker::fuzz
