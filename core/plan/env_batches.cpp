#include "plan/env_batches.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "util/error.h"

namespace stoker {

struct EnvBatchIterator::DeviceState {
  int device = 0;
  std::vector<int> envs;  // in env order
  at::Generator generator;
  std::vector<std::int64_t> order;
  std::int64_t cursor = 0;
};

void validateEnvBatchConfig(const EnvBatchConfig& c) {
  if (c.datasetSize < 1) throwBadInput("dataset size", "must be at least 1 (got " + std::to_string(c.datasetSize) + ")");
  if (c.batchPerEnv < 1) throwBadInput("batch per env", "must be at least 1 (got " + std::to_string(c.batchPerEnv) + ")");
  if (c.envDevice.empty()) throwBadInput("envs", "at least one env is needed");
  for (std::size_t e = 0; e < c.envDevice.size(); ++e)
    if (c.envDevice[e] < 0) throwBadInput("env " + std::to_string(e), "has a negative device index");
}

std::vector<std::vector<std::int64_t>> splitWindowAmongEnvs(const std::vector<std::int64_t>& window, int parts) {
  std::vector<std::vector<std::int64_t>> chunks(static_cast<std::size_t>(parts));
  const auto n = static_cast<std::int64_t>(window.size());
  std::int64_t at = 0;
  for (int p = 0; p < parts; ++p) {
    const std::int64_t len = n / parts + (p < n % parts ? 1 : 0);
    chunks[static_cast<std::size_t>(p)].assign(window.begin() + at, window.begin() + at + len);
    at += len;
  }
  checkEnvChunksContiguous(chunks);
  return chunks;
}

void checkEnvChunksContiguous(const std::vector<std::vector<std::int64_t>>& chunks) {
  // esper raises here rather than mis-assign batches to envs.
  bool sawEmpty = false;
  for (std::size_t p = 0; p < chunks.size(); ++p) {
    if (chunks[p].empty()) sawEmpty = true;
    else if (sawEmpty)
      throw Error(ErrorKind::Internal, "env split", "non-contiguous batch: env " + std::to_string(p) +
                                                        " has samples after an empty env");
  }
}

EnvBatchIterator::EnvBatchIterator(EnvBatchConfig config) : config_(std::move(config)) {
  validateEnvBatchConfig(config_);
  std::map<int, std::vector<int>> byDevice;
  for (std::size_t e = 0; e < config_.envDevice.size(); ++e) byDevice[config_.envDevice[e]].push_back(static_cast<int>(e));
  for (auto& [device, envs] : byDevice) {
    auto s = std::make_unique<DeviceState>();
    s->device = device;
    s->envs = envs;
    s->generator = at::make_generator<at::CPUGeneratorImpl>(config_.seed + 1009ULL * static_cast<std::uint64_t>(device));
    devices_.push_back(std::move(s));
  }
}

EnvBatchIterator::~EnvBatchIterator() = default;

void EnvBatchIterator::startEpoch() {
  for (auto& d : devices_) {
    if (config_.shuffle) {
      at::Tensor p = at::randperm(config_.datasetSize, d->generator, at::TensorOptions().dtype(at::kLong));
      const auto* v = p.data_ptr<std::int64_t>();
      d->order.assign(v, v + p.numel());
    } else {
      d->order.resize(static_cast<std::size_t>(config_.datasetSize));
      std::iota(d->order.begin(), d->order.end(), 0);
    }
    d->cursor = 0;
  }
  ++epoch_;
  step_ = 0;
}

std::int64_t EnvBatchIterator::length() const {
  std::int64_t shortest = -1;
  for (const auto& d : devices_) {
    const std::int64_t window = config_.batchPerEnv * static_cast<std::int64_t>(d->envs.size());
    const std::int64_t steps =
        config_.dropLast ? config_.datasetSize / window : (config_.datasetSize + window - 1) / window;
    shortest = shortest < 0 ? steps : std::min(shortest, steps);
  }
  return shortest;
}

std::optional<std::vector<EnvSlice>> EnvBatchIterator::next() {
  if (epoch_ < 0) throwBadInput("env batches", "next() called before startEpoch(): no epoch has been drawn");
  if (step_ >= length()) return std::nullopt;
  std::vector<EnvSlice> slices;
  for (auto& d : devices_) {
    const std::int64_t window = config_.batchPerEnv * static_cast<std::int64_t>(d->envs.size());
    const std::int64_t end = std::min<std::int64_t>(d->cursor + window, config_.datasetSize);
    std::vector<std::int64_t> taken(d->order.begin() + d->cursor, d->order.begin() + end);
    d->cursor = end;
    auto chunks = splitWindowAmongEnvs(taken, static_cast<int>(d->envs.size()));
    for (std::size_t i = 0; i < chunks.size(); ++i)
      if (!chunks[i].empty()) slices.push_back({d->envs[i], d->device, std::move(chunks[i])});
  }
  std::sort(slices.begin(), slices.end(), [](const EnvSlice& a, const EnvSlice& b) { return a.env < b.env; });
  ++step_;
  return slices;
}

}  // namespace stoker
