#include "data/buffer_pool.h"

#include <algorithm>

namespace stoker {

void BufferLease::fenceRelease(std::shared_ptr<DeviceFence> fence) {
  std::lock_guard<std::mutex> lock(mutex_);
  fence_ = std::move(fence);
}

void BufferLease::fenceRelease(FenceMaker maker) {
  if (!maker) return;
  std::lock_guard<std::mutex> lock(mutex_);
  fenceMaker_ = std::move(maker);
}

void BufferLease::alsoFenceRelease(FenceMaker maker) {
  if (!maker) return;
  std::lock_guard<std::mutex> lock(mutex_);
  alsoMakers_.push_back(std::move(maker));
}

BufferLease::~BufferLease() {
  std::shared_ptr<DeviceFence> fence;
  try {
    std::vector<std::shared_ptr<DeviceFence>> fences{fenceMaker_ ? fenceMaker_() : std::move(fence_)};
    for (const FenceMaker& also : alsoMakers_) fences.push_back(also());
    fence = allOf(std::move(fences));
  } catch (const std::exception&) {
    // No fence can be made (a broken device context): the block is never handed out by the pool
    // again, only freed, and the pool stops counting it so its memory figures stay true.
    if (auto pool = pool_.lock()) pool->forget();
    return;
  }
  if (auto pool = pool_.lock()) {
    pool->release(std::move(block_), std::move(fence));
  } else if (fence) {
    fence->wait();  // freed now: the allocator must not hand it out while the device still uses it
  }
}

// Blocks the device may still use are freed only once it got past them (a loader destroyed after
// an epoch stopped early, a retune replacing its pools).
BufferPool::~BufferPool() {
  for (const Idle& i : idle_)
    if (i.fence) i.fence->wait();
  for (const Idle& i : retiring_)
    if (i.fence) i.fence->wait();
}

std::shared_ptr<BufferPool> BufferPool::create(Allocate allocate, std::int64_t blockBytes, int keepFree) {
  return std::shared_ptr<BufferPool>(new BufferPool(std::move(allocate), blockBytes, keepFree));
}

std::shared_ptr<BufferLease> BufferPool::acquire() {
  at::Tensor block;
  std::shared_ptr<DeviceFence> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropRetired();
    ++leased_;
    // The most recently returned block when it is ready (warm in caches: a host block, with no
    // fence, always is); else the oldest when it is. Fences are recorded in release order and a
    // stream passes them in that order, so past a newest and an oldest that are not done no other
    // is: at most two fence queries (CUDA event queries) per batch, not one per idle block.
    // Else, with the pool full of blocks the device still uses, the oldest, waited for below.
    auto ready = idle_.end();
    if (!idle_.empty() && idle_.back().ready())
      ready = std::prev(idle_.end());
    else if (idle_.size() > 1 && idle_.front().ready())
      ready = idle_.begin();
    if (ready != idle_.end()) {
      block = std::move(ready->block);
      idle_.erase(ready);
    } else if (!idle_.empty() && static_cast<int>(idle_.size()) >= keepFree_) {
      block = std::move(idle_.front().block);
      pending = std::move(idle_.front().fence);
      idle_.erase(idle_.begin());
      ++fenceWaits_;
    }
  }
  if (pending) pending->wait();
  if (!block.defined()) {
    try {
      block = allocate_(blockBytes_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      --leased_;
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++allocations_;
  }
  return std::make_shared<BufferLease>(weak_from_this(), std::move(block));
}

void BufferPool::release(at::Tensor block, std::shared_ptr<DeviceFence> fence) {
  Idle idle{std::move(block), std::move(fence)};  // a block over keepFree and done is freed on return
  std::lock_guard<std::mutex> lock(mutex_);
  --leased_;
  if (static_cast<int>(idle_.size()) < keepFree_) idle_.push_back(std::move(idle));
  else if (!idle.ready()) retiring_.push_back(std::move(idle));  // freed now, the allocator could hand it out
  dropRetired();
}

void BufferPool::forget() {
  std::lock_guard<std::mutex> lock(mutex_);
  --leased_;
}

void BufferPool::dropRetired() {
  retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(), [](const Idle& i) { return i.ready(); }),
                  retiring_.end());
}

std::int64_t BufferPool::reservedBlocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return leased_ + static_cast<std::int64_t>(idle_.size() + retiring_.size());
}

std::int64_t BufferPool::allocatedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return leased_ * blockBytes_;
}

std::int64_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

std::int64_t BufferPool::fenceWaits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fenceWaits_;
}

}  // namespace stoker
