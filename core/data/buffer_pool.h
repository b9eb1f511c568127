// data/buffer_pool: batch buffers recycled instead of allocated per batch
// (rumus' buffer pool). A lease is shared by the tensors viewing its block;
// the block goes back to the pool when the last of them is freed, so batches
// never alias while the caller holds them, yet steady state allocates
// nothing (no page faults, no device allocator calls).
//
// On a device that works asynchronously (CUDA), the last host reference
// dropping does not mean the device is done with the block: kernels queued
// on the consumer's stream may still read it, a copy may still fill it. A
// lease therefore carries a release fence (PyTorch's recordStream
// discipline, by hand): the block comes back with it, and is handed out
// again only once the device got past it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "data/device_fence.h"

namespace stoker {

class BufferPool;

class BufferLease {
 public:
  BufferLease(std::weak_ptr<BufferPool> pool, at::Tensor block) : pool_(std::move(pool)), block_(std::move(block)) {}
  ~BufferLease();
  BufferLease(const BufferLease&) = delete;
  BufferLease& operator=(const BufferLease&) = delete;
  std::uint8_t* data() const { return static_cast<std::uint8_t*>(block_.data_ptr()); }
  // The block is reusable once `fence` is done (the copy that fills it, or reads from it).
  void fenceRelease(std::shared_ptr<DeviceFence> fence);
  // The block is reusable once the fence `maker` makes at release time is done (the consumer's
  // stream, bound at hand-over). Takes precedence over a fence set before; an empty maker does not.
  void fenceRelease(FenceMaker maker);
  // Also wait, before reuse, for the fence `maker` makes at release time (another stream the
  // consumer reads the batch on: Batch::recordStream). Kept beside the fences above, not instead.
  void alsoFenceRelease(FenceMaker maker);

 private:
  std::weak_ptr<BufferPool> pool_;
  at::Tensor block_;
  std::mutex mutex_;  // the fence is set on one thread, the lease may die on another
  std::shared_ptr<DeviceFence> fence_;
  FenceMaker fenceMaker_;
  std::vector<FenceMaker> alsoMakers_;
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  using Allocate = std::function<at::Tensor(std::int64_t bytes)>;
  // Blocks of `blockBytes` from `allocate`; at most `keepFree` idle blocks
  // are kept, more are freed when returned.
  static std::shared_ptr<BufferPool> create(Allocate allocate, std::int64_t blockBytes, int keepFree);
  ~BufferPool();  // waits for the fences of the blocks it still holds

  // Hands out an idle block whose fence is done, else allocates one (the
  // prefetch ring, not the pool, bounds how many batches are in flight).
  // Only when `keepFree` idle blocks all wait on the device does it block,
  // for the oldest of them: a consumer whose device lags slows the producers
  // instead of growing the pool.
  std::shared_ptr<BufferLease> acquire();
  std::int64_t blockBytes() const { return blockBytes_; }
  std::int64_t reservedBlocks() const;  // idle + leased + retiring
  std::int64_t reservedBytes() const { return reservedBlocks() * blockBytes_; }
  std::int64_t allocatedBytes() const;  // leased
  std::int64_t allocations() const;     // blocks ever allocated
  std::int64_t fenceWaits() const;      // acquires that waited for the device

 private:
  friend class BufferLease;
  BufferPool(Allocate allocate, std::int64_t blockBytes, int keepFree)
      : allocate_(std::move(allocate)), blockBytes_(blockBytes), keepFree_(keepFree) {}
  struct Idle {
    at::Tensor block;
    std::shared_ptr<DeviceFence> fence;  // null: reusable now
    bool ready() const { return !fence || fence->done(); }
  };
  void release(at::Tensor block, std::shared_ptr<DeviceFence> fence);
  void forget();       // a lease ended without returning its block
  void dropRetired();  // under mutex_

  Allocate allocate_;
  std::int64_t blockBytes_;
  int keepFree_;
  mutable std::mutex mutex_;
  std::vector<Idle> idle_;      // oldest first
  std::vector<Idle> retiring_;  // over keepFree, freed once their fence is done
  std::int64_t leased_ = 0;
  std::int64_t allocations_ = 0;
  std::int64_t fenceWaits_ = 0;
};

}  // namespace stoker
