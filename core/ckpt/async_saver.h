// ckpt/async_saver: checkpointing from a training loop without stalling it
// (the seed's AsyncCheckpointer). save() copies this rank's tensors to host
// memory (pinned for CUDA tensors) on the calling thread, then writes
// DIR/rank_<r>.safetensors in the background under a temporary name renamed
// into place after fsync; rank 0 writes metadata.json last. One save may be in
// flight at a time.
//
// Every save names its step, stamped into each rank file and metadata.json: the ranks do not wait
// for each other, so while a save into a directory that holds an earlier one runs -- or after a
// rank died in it -- the directory mixes two saves, and readers refuse it (a problem naming the
// steps) instead of loading it as one. For a checkpoint that survives a crash mid-save, save each
// step into a directory of its own (as DCP's checkpoint_id), and keep the last complete one.
#pragma once

#include <ATen/core/Tensor.h>

#include <future>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/ranks_metadata.h"

namespace stoker {

class SaveFuture {
 public:
  SaveFuture() = default;
  explicit SaveFuture(std::shared_future<void> f) : f_(std::move(f)) {}
  // Blocks until the save finished; throws its error. Safe to call again:
  // later calls return (or throw) the same result at once.
  void wait() const;
  bool isDone() const;
  bool valid() const { return f_.valid(); }

 private:
  std::shared_future<void> f_;
};

class AsyncCheckpointer {
 public:
  // Throws Error(BadInput) for world size < 1, rank out of range or specs
  // whose shard_sizes do not match the world size.
  AsyncCheckpointer(std::string dir, int rank, int worldSize, ShardSpecs specs);
  ~AsyncCheckpointer();  // waits for a save in flight (never abandons a write)

  // `stateDict` holds this rank's shard of every tensor in the specs, with the
  // shape the specs give rank `rank`; `step` names the save (the training step: every rank gives
  // the same). Throws Error(BadInput) for a mismatch, a negative step and when the previous save
  // has not finished.
  SaveFuture save(const std::vector<std::pair<std::string, at::Tensor>>& stateDict, std::int64_t step);

  const std::string& dir() const { return dir_; }
  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }

 private:
  std::string dir_;
  int rank_;
  int worldSize_;
  ShardSpecs specs_;
  SaveFuture inFlight_;
};

}  // namespace stoker
