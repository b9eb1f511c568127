#include "data/buffer_pool.h"

namespace stoker {

BufferLease::~BufferLease() {
  if (auto pool = pool_.lock()) pool->release(std::move(block_));
}

std::shared_ptr<BufferPool> BufferPool::create(Allocate allocate, std::int64_t blockBytes, int keepFree) {
  return std::shared_ptr<BufferPool>(new BufferPool(std::move(allocate), blockBytes, keepFree));
}

std::shared_ptr<BufferLease> BufferPool::acquire() {
  at::Tensor block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++leased_;
    if (!idle_.empty()) {
      block = std::move(idle_.back());
      idle_.pop_back();
    }
  }
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

void BufferPool::release(at::Tensor block) {
  std::lock_guard<std::mutex> lock(mutex_);
  --leased_;
  if (static_cast<int>(idle_.size()) < keepFree_) idle_.push_back(std::move(block));
}

std::int64_t BufferPool::reservedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return (leased_ + static_cast<std::int64_t>(idle_.size())) * blockBytes_;
}

std::int64_t BufferPool::allocatedBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return leased_ * blockBytes_;
}

std::int64_t BufferPool::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

}  // namespace stoker
