#include "data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
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

std::vector<std::int64_t> epochOrder(std::int64_t samples, std::uint64_t seed, std::int64_t epoch, bool shuffle) {
  return shuffle ? randomPermutation(samples, seed + static_cast<std::uint64_t>(epoch)) : sequentialIndices(samples);
}

std::vector<std::vector<std::int64_t>> dealInterleaved(const std::vector<std::int64_t>& order, int worldSize,
                                                       bool dropLast, std::int64_t* padding, std::int64_t* dropped) {
  const auto n = static_cast<std::int64_t>(order.size());
  // torch: ceil(n / W) each, or with drop_last ceil((n - W) / W) = floor(n / W).
  const std::int64_t perRank = dropLast ? n / worldSize : (n + worldSize - 1) / worldSize;
  const std::int64_t total = perRank * worldSize;
  if (padding) *padding = n == 0 ? 0 : std::max<std::int64_t>(0, total - n);
  if (dropped) *dropped = std::max<std::int64_t>(0, n - total);
  std::vector<std::vector<std::int64_t>> ranks(static_cast<std::size_t>(worldSize));
  if (n == 0) return ranks;
  for (auto& r : ranks) r.reserve(static_cast<std::size_t>(perRank));
  // Positions past the order repeat it from its start (torch's padding).
  for (std::int64_t i = 0; i < total; ++i)
    ranks[static_cast<std::size_t>(i % worldSize)].push_back(order[static_cast<std::size_t>(i % n)]);
  return ranks;
}

std::vector<std::int64_t> distributedIndices(const DistributedSamplerConfig& c, std::int64_t epoch) {
  if (c.worldSize < 1) throwBadInput("world size", "must be at least 1");
  if (c.rank < 0 || c.rank >= c.worldSize)
    throwBadInput("rank " + std::to_string(c.rank), "must be 0-" + std::to_string(c.worldSize - 1));
  auto ranks = dealInterleaved(epochOrder(c.datasetSize, c.seed, epoch, c.shuffle), c.worldSize, c.dropLast);
  return std::move(ranks[static_cast<std::size_t>(c.rank)]);
}

void checkSamplerFits(const LoaderOptions& o, std::int64_t n) {
  if (o.sampler_type == SamplerType::Weighted && static_cast<std::int64_t>(o.weights.size()) != n)
    throwBadInput("weights", "has " + std::to_string(o.weights.size()) + " entries for " + std::to_string(n) + " samples");
}

namespace {

// A draw of the weighted or with-replacement sampler on several ranks: the same draws on every rank
// (seed + epoch), dealt as DistributedSampler deals its order -- rank r takes positions r, r + W, ...,
// padded from the start (or cut, drop_last) to equal shares, so the ranks take equal steps and
// together see the draw once. Taken whole on each rank, every GPU trained on the same batches.
std::vector<std::int64_t> shareOfDraws(std::vector<std::int64_t> draws, const LoaderOptions& o) {
  if (o.shard_world_size <= 1) return draws;
  if (o.shard_rank < 0 || o.shard_rank >= o.shard_world_size)
    throwBadInput("shard_rank " + std::to_string(o.shard_rank), "must be 0-" + std::to_string(o.shard_world_size - 1));
  auto ranks = dealInterleaved(draws, o.shard_world_size, o.drop_last);
  return std::move(ranks[static_cast<std::size_t>(o.shard_rank)]);
}

}  // namespace

std::vector<std::int64_t> epochIndices(const LoaderOptions& o, std::int64_t n, std::int64_t epoch) {
  checkSamplerFits(o, n);
  const std::uint64_t seed = o.seed + static_cast<std::uint64_t>(epoch);
  const std::int64_t draws = o.num_samples > 0 ? o.num_samples : n;
  switch (o.sampler_type) {
    case SamplerType::Sequential: return sequentialIndices(n);
    case SamplerType::Random: return epochOrder(n, o.seed, epoch, o.shuffle);
    case SamplerType::RandomWithReplacement: return shareOfDraws(randomWithReplacement(n, draws, seed), o);
    case SamplerType::Distributed:
      return distributedIndices({n, o.shard_rank, o.shard_world_size, o.shuffle, o.seed, o.drop_last}, epoch);
    case SamplerType::Weighted:
      return shareOfDraws(weightedIndices(o.weights, draws, true, seed), o);
  }
  return {};
}

}  // namespace stoker
