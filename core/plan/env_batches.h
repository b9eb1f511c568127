// plan/env_batches: several training "envs" sharing each device (the esper
// SharedGPUGatherBatchIterator). Envs are grouped by device in env order;
// each device draws its own permutation of the whole dataset every epoch
// from a generator seeded seed + 1009 * device_index (never a hash, so the
// stream is the same in every process), takes one window of
// batch_per_env * envs_on_device samples per step and splits it among its
// envs like torch.tensor_split. The epoch stops at the shortest device.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace stoker {

struct EnvBatchConfig {
  std::int64_t datasetSize = 0;
  std::int64_t batchPerEnv = 1;
  std::vector<int> envDevice;  // device index of env e (e = 0, 1, ...)
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool dropLast = true;  // false: a device's last window may be partial
};

struct EnvSlice {
  int env = 0;
  int device = 0;
  std::vector<std::int64_t> indices;
};

// Throws Error(BadInput) naming the field for an empty dataset,
// batchPerEnv < 1, no envs or a negative device index.
void validateEnvBatchConfig(const EnvBatchConfig& c);

// Splits `window` into `parts` contiguous chunks the way torch.tensor_split
// does (the first size % parts chunks one longer), then checks them.
std::vector<std::vector<std::int64_t>> splitWindowAmongEnvs(const std::vector<std::int64_t>& window, int parts);
// Throws Error(Internal) when a non-empty chunk follows an empty one: an
// env with data after an empty env would shift every later env's slice.
void checkEnvChunksContiguous(const std::vector<std::vector<std::int64_t>>& chunks);

class EnvBatchIterator {
 public:
  explicit EnvBatchIterator(EnvBatchConfig config);
  ~EnvBatchIterator();

  // Draws the next epoch's permutations; epochs run in order from 0.
  void startEpoch();
  // Steps in the current epoch: the minimum over devices.
  std::int64_t length() const;
  // The next step's slices for every env that has data, or nullopt at the
  // end of the epoch. Throws Error(BadInput) before the first startEpoch().
  std::optional<std::vector<EnvSlice>> next();

  int devices() const { return static_cast<int>(devices_.size()); }
  std::int64_t epoch() const { return epoch_; }

 private:
  struct DeviceState;
  EnvBatchConfig config_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::int64_t epoch_ = -1;
  std::int64_t step_ = 0;
};

}  // namespace stoker
