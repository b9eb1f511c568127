// data/buffer_pool: batch buffers recycled instead of allocated per batch
// (rumus' buffer pool). A lease is shared by the tensors viewing its block;
// the block goes back to the pool when the last of them is freed, so batches
// never alias while the caller holds them, yet steady state allocates
// nothing (no page faults, no device allocator calls).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace stoker {

class BufferPool;

class BufferLease {
 public:
  BufferLease(std::weak_ptr<BufferPool> pool, at::Tensor block) : pool_(std::move(pool)), block_(std::move(block)) {}
  ~BufferLease();
  BufferLease(const BufferLease&) = delete;
  BufferLease& operator=(const BufferLease&) = delete;
  std::uint8_t* data() const { return static_cast<std::uint8_t*>(block_.data_ptr()); }

 private:
  std::weak_ptr<BufferPool> pool_;
  at::Tensor block_;
};

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  using Allocate = std::function<at::Tensor(std::int64_t bytes)>;
  // Blocks of `blockBytes` from `allocate`; at most `keepFree` idle blocks
  // are kept, more are freed when returned.
  static std::shared_ptr<BufferPool> create(Allocate allocate, std::int64_t blockBytes, int keepFree);

  // Never blocks: allocates when no idle block is left (the prefetch ring,
  // not the pool, bounds how many batches are in flight).
  std::shared_ptr<BufferLease> acquire();
  std::int64_t blockBytes() const { return blockBytes_; }
  std::int64_t reservedBytes() const;   // idle + leased
  std::int64_t allocatedBytes() const;  // leased
  std::int64_t allocations() const;     // blocks ever allocated

 private:
  friend class BufferLease;
  BufferPool(Allocate allocate, std::int64_t blockBytes, int keepFree)
      : allocate_(std::move(allocate)), blockBytes_(blockBytes), keepFree_(keepFree) {}
  void release(at::Tensor block);

  Allocate allocate_;
  std::int64_t blockBytes_;
  int keepFree_;
  mutable std::mutex mutex_;
  std::vector<at::Tensor> idle_;
  std::int64_t leased_ = 0;
  std::int64_t allocations_ = 0;
};

}  // namespace stoker
