#include "data/datasets/wds_remote_stream.h"

#include <algorithm>

#include "util/run_jobs.h"

namespace stoker {

WdsRemoteStream::WdsRemoteStream(const RemoteObject& object, const PartOptions& parts, ByteVector head, KeepFn keep,
                                 const CancelToken* cancel)
    : object_(object),
      parts_(parts),
      block_(blockBytesFor(parts)),
      keep_(parts.cache ? nullptr : std::move(keep)),
      cancel_(cancel) {
  if (!head.empty() && head.size() == std::min<std::uint64_t>(block_, object_.size())) fetched_.push_back(Block{0, std::move(head)});
}

void WdsRemoteStream::attach(archive* a) {
  archive_read_set_callback_data(a, this);
  archive_read_set_read_callback(a, &WdsRemoteStream::readCallback);
  archive_read_set_skip_callback(a, &WdsRemoteStream::skipCallback);
}

la_ssize_t WdsRemoteStream::readCallback(archive*, void* self, const void** buffer) {
  auto* s = static_cast<WdsRemoteStream*>(self);
  if (s->at_ >= s->object_.size()) return 0;
  try {
    if (s->cancel_) s->cancel_->throwIfCancelled(s->object_.url());
    return s->parts_.cache && !s->object_.cacheId().empty() ? s->readCachedParts(buffer) : s->readBlocks(buffer);
  } catch (...) {
    s->error_ = std::current_exception();
    return -1;
  }
}

la_int64_t WdsRemoteStream::skipCallback(archive*, void* self, la_int64_t request) {
  auto* s = static_cast<WdsRemoteStream*>(self);
  const std::uint64_t n = std::min<std::uint64_t>(static_cast<std::uint64_t>(request), s->object_.size() - s->at_);
  s->at_ += n;
  return static_cast<la_int64_t>(n);
}

la_ssize_t WdsRemoteStream::readBlocks(const void** buffer) {
  retire(handed_);  // libarchive is done with it once it asks for more
  // Blocks a skip passed: the scan is done with them too.
  while (!fetched_.empty() && (fetched_.front().index + 1) * block_ <= at_) {
    retire(fetched_.front());
    fetched_.pop_front();
  }
  if (fetched_.empty()) fetchFrom(at_ / block_);
  handed_ = std::move(fetched_.front());
  fetched_.pop_front();
  const std::uint64_t start = handed_.index * block_, end = start + handed_.bytes.size();
  *buffer = handed_.bytes.data() + (at_ - start);
  const std::uint64_t n = end - at_;
  at_ = end;
  return static_cast<la_ssize_t>(n);
}

void WdsRemoteStream::fetchFrom(std::uint64_t index) {
  const std::uint64_t blocks = (object_.size() + block_ - 1) / block_;
  const auto count = static_cast<std::size_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(parts_.maxInflight, 1)), blocks - index));
  std::vector<Block> batch(count);
  for (std::size_t k = 0; k < count; ++k) {
    batch[k].index = index + k;
    if (!spare_.empty()) {
      batch[k].bytes = std::move(spare_.back());
      spare_.pop_back();
    }
    const std::uint64_t at = batch[k].index * block_;
    batch[k].bytes.resize(static_cast<std::size_t>(std::min<std::uint64_t>(block_, object_.size() - at)));
  }
  PartOptions one;  // a block in one request: the blocks are the parallelism
  one.partSize = static_cast<std::int64_t>(block_);
  one.maxInflight = 1;
  forEachInParallel(static_cast<std::int64_t>(count), parts_.maxInflight, [&](std::int64_t k) {
    Block& b = batch[static_cast<std::size_t>(k)];
    object_.read(b.index * block_, b.bytes.data(), b.bytes.size(), one);
  });
  for (Block& b : batch) fetched_.push_back(std::move(b));
}

void WdsRemoteStream::retire(Block& b) {
  if (b.bytes.empty()) return;
  if (keep_) {
    if (keep_(b.index, b.bytes)) {
      b.bytes = ByteVector();
      return;
    }
    keep_ = nullptr;  // the budget is spent: the later blocks go too
  }
  spare_.push_back(std::move(b.bytes));
  spare_.back().clear();  // the capacity stays, for the next fetch
  b.bytes = ByteVector();
}

void WdsRemoteStream::finish() {
  retire(handed_);
  for (Block& b : fetched_) retire(b);
  fetched_.clear();
  spare_.clear();
}

// With a cache, libarchive reads the cache's mapping of each part in place: copied into a window
// (zeroed first), every byte was written twice more and every page of a fresh window faulted (5,000
// photos in 100 shards: 26 % of the run's page faults). The parts of the next window are still
// fetched in parallel.
la_ssize_t WdsRemoteStream::readCachedParts(const void** buffer) {
  const std::uint64_t windowBytes = block_ * static_cast<std::uint64_t>(std::max(parts_.maxInflight, 1));
  if (at_ >= cachedTo_) {
    cachedTo_ = at_ + std::min<std::uint64_t>(windowBytes, object_.size() - at_);
    object_.cacheParts(at_, cachedTo_ - at_, parts_);
  }
  const std::uint64_t n = std::min<std::uint64_t>((at_ / block_ + 1) * block_, object_.size()) - at_;
  *buffer = object_.bytesAt(at_, static_cast<std::size_t>(n), parts_, scratch_);
  at_ += n;
  return static_cast<la_ssize_t>(n);
}

}  // namespace stoker
