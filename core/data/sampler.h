// data/sampler: the sample order of one epoch. Every random order comes from
// a libtorch CPU generator seeded with seed + epoch and drawn the way
// PyTorch's samplers draw, so the indices equal PyTorch's for the same seed:
// random = RandomSampler(generator=Generator().manual_seed(seed + epoch)),
// distributed = DistributedSampler(seed=seed) after set_epoch(epoch),
// weighted = WeightedRandomSampler(generator=...manual_seed(seed + epoch)).
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader_options.h"

namespace stoker {

std::vector<std::int64_t> sequentialIndices(std::int64_t n);
std::vector<std::int64_t> randomPermutation(std::int64_t n, std::uint64_t seed);
std::vector<std::int64_t> randomWithReplacement(std::int64_t n, std::int64_t numSamples, std::uint64_t seed);
std::vector<std::int64_t> weightedIndices(const std::vector<double>& weights, std::int64_t numSamples, bool replacement,
                                          std::uint64_t seed);

struct DistributedSamplerConfig {
  std::int64_t datasetSize = 0;
  int rank = 0;
  int worldSize = 1;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool dropLast = false;
};
// Samples each rank gets per epoch (torch's num_samples).
std::int64_t distributedSamplesPerRank(const DistributedSamplerConfig& c);
std::vector<std::int64_t> distributedIndices(const DistributedSamplerConfig& c, std::int64_t epoch);

// An epoch's order before it is dealt to ranks: randperm(samples) from a
// generator seeded seed + epoch (torch's), or 0..samples-1 unshuffled.
std::vector<std::int64_t> epochOrder(std::int64_t samples, std::uint64_t seed, std::int64_t epoch, bool shuffle);

// Most ranks a plan or a sharded sampler holds (dealInterleaved keeps a list per rank: 2^31-1
// ranks asked for ~100 GiB); torch's largest jobs are far below it.
inline constexpr int kMaxWorldSize = 1 << 20;

// Deals `order` to `worldSize` ranks like DistributedSampler: padded by
// repeating from its start, or cut to a multiple of worldSize with
// dropLast; rank r takes positions r, r + W, ... Returns every rank's
// entries; `padding`/`dropped` (optional) get the counts.
std::vector<std::vector<std::int64_t>> dealInterleaved(const std::vector<std::int64_t>& order, int worldSize,
                                                       bool dropLast, std::int64_t* padding = nullptr,
                                                       std::int64_t* dropped = nullptr);

// Throws Error(BadInput) when the options cannot sample a dataset of this
// size (a weighted sampler needs one weight per sample).
void checkSamplerFits(const LoaderOptions& o, std::int64_t datasetSize);

// The order the loader serves in epoch `epoch` for these options.
std::vector<std::int64_t> epochIndices(const LoaderOptions& o, std::int64_t datasetSize, std::int64_t epoch);

}  // namespace stoker
