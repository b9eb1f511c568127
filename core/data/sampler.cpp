#include "data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <numeric>

#include "util/error.h"

namespace stoker {
namespace {

at::Generator seeded(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

std::vector<std::int64_t> toVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  const auto* p = c.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + c.numel());
}

}  // namespace

std::vector<std::int64_t> sequentialIndices(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<std::int64_t> randomPermutation(std::int64_t n, std::uint64_t seed) {
  auto gen = seeded(seed);
  return toVector(at::randperm(n, gen, at::TensorOptions().dtype(at::kLong)));
}

std::vector<std::int64_t> randomWithReplacement(std::int64_t n, std::int64_t numSamples, std::uint64_t seed) {
  // RandomSampler draws randint(high=n) in chunks of 32; the CPU kernel
  // draws serially, so one call yields the same stream.
  auto gen = seeded(seed);
  return toVector(at::randint(n, {numSamples}, gen, at::TensorOptions().dtype(at::kLong)));
}

std::vector<std::int64_t> weightedIndices(const std::vector<double>& weights, std::int64_t numSamples, bool replacement,
                                          std::uint64_t seed) {
  if (!replacement && numSamples > static_cast<std::int64_t>(weights.size()))
    throwBadInput("num_samples", "cannot draw more samples than weights without replacement");
  auto gen = seeded(seed);
  at::Tensor w = at::from_blob(const_cast<double*>(weights.data()), {static_cast<std::int64_t>(weights.size())}, at::kDouble);
  return toVector(at::multinomial(w, numSamples, replacement, gen));
}

std::int64_t distributedSamplesPerRank(const DistributedSamplerConfig& c) {
  const std::int64_t n = c.datasetSize, w = c.worldSize;
  if (c.dropLast && n % w != 0) return (n - 1) / w;  // torch: ceil((n - w) / w), 0 when n < w
  return (n + w - 1) / w;
}

std::vector<std::int64_t> distributedGlobalOrder(const DistributedSamplerConfig& c, std::int64_t epoch) {
  if (c.worldSize < 1) throwBadInput("world size", "must be at least 1");
  if (c.rank < 0 || c.rank >= c.worldSize)
    throwBadInput("rank " + std::to_string(c.rank), "must be 0-" + std::to_string(c.worldSize - 1));
  std::vector<std::int64_t> order = c.shuffle ? randomPermutation(c.datasetSize, c.seed + static_cast<std::uint64_t>(epoch))
                                              : sequentialIndices(c.datasetSize);
  const std::int64_t total = distributedSamplesPerRank(c) * c.worldSize;
  if (static_cast<std::int64_t>(order.size()) >= total) {
    order.resize(static_cast<std::size_t>(total));
  } else if (!order.empty()) {
    // torch pads by repeating the order from its start as often as needed.
    const std::size_t base = order.size();
    for (std::size_t i = 0; order.size() < static_cast<std::size_t>(total); ++i) order.push_back(order[i % base]);
  }
  return order;
}

std::vector<std::int64_t> distributedIndices(const DistributedSamplerConfig& c, std::int64_t epoch) {
  const auto order = distributedGlobalOrder(c, epoch);
  std::vector<std::int64_t> mine;
  for (std::size_t i = static_cast<std::size_t>(c.rank); i < order.size(); i += static_cast<std::size_t>(c.worldSize))
    mine.push_back(order[i]);
  return mine;
}

void checkSamplerFits(const LoaderOptions& o, std::int64_t n) {
  if (o.sampler_type == SamplerType::Weighted && static_cast<std::int64_t>(o.weights.size()) != n)
    throwBadInput("weights", "has " + std::to_string(o.weights.size()) + " entries for " + std::to_string(n) + " samples");
}

std::vector<std::int64_t> epochIndices(const LoaderOptions& o, std::int64_t n, std::int64_t epoch) {
  checkSamplerFits(o, n);
  const std::uint64_t seed = o.seed + static_cast<std::uint64_t>(epoch);
  const std::int64_t draws = o.num_samples > 0 ? o.num_samples : n;
  switch (o.sampler_type) {
    case SamplerType::Sequential: return sequentialIndices(n);
    case SamplerType::Random: return o.shuffle ? randomPermutation(n, seed) : sequentialIndices(n);
    case SamplerType::RandomWithReplacement: return randomWithReplacement(n, draws, seed);
    case SamplerType::Distributed:
      return distributedIndices({n, o.shard_rank, o.shard_world_size, o.shuffle, o.seed, o.drop_last}, epoch);
    case SamplerType::Weighted:
      return weightedIndices(o.weights, draws, true, seed);
  }
  return {};
}

}  // namespace stoker
