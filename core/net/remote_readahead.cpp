#include "net/remote_readahead.h"

#include <algorithm>
#include <cstring>

#include "net/remote_object.h"

namespace stoker {

RemoteReadahead::RemoteReadahead(ReadaheadOptions options) : options_(options) {}

RemoteReadahead::~RemoteReadahead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : fetchers_) t.join();
}

RemoteReadahead::Counters RemoteReadahead::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counters c = counters_;
  c.held = blocks_.size();
  return c;
}

void RemoteReadahead::read(const std::shared_ptr<const RemoteObject>& object, void* dst, std::uint64_t n, std::uint64_t offset,
                           const std::function<bool()>& fromElsewhere) {
  object->requireRange(offset, n);
  auto* out = static_cast<std::uint8_t*>(dst);
  while (n > 0) {
    const std::uint64_t index = offset / options_.blockBytes;
    const std::shared_ptr<Block> block = demand(object, index, fromElsewhere);
    if (!block) return;
    const std::uint64_t in = offset - index * options_.blockBytes;
    const std::uint64_t take = std::min<std::uint64_t>(n, block->bytes.size() - in);
    std::memcpy(out, block->bytes.data() + in, static_cast<std::size_t>(take));
    out += take;
    offset += take;
    n -= take;
  }
}

std::shared_ptr<RemoteReadahead::Block> RemoteReadahead::demand(const std::shared_ptr<const RemoteObject>& object,
                                                                std::uint64_t index, const std::function<bool()>& fromElsewhere) {
  std::unique_lock<std::mutex> lock(mutex_);
  startFetchers();
  const Key key{object.get(), index};
  auto it = blocks_.find(key);
  if (it == blocks_.end() && fromElsewhere && fromElsewhere()) return nullptr;
  lastIndex_[object.get()] = index;
  if (it == blocks_.end()) {
    makeRoom();  // a block a reader needs is taken even past the limit
    auto block = std::make_shared<Block>();
    block->object = object;
    block->lastUse = ++clock_;
    it = blocks_.emplace(key, std::move(block)).first;
    queue_.push_front(key);
    work_.notify_one();
  } else if (auto queued = std::find(queue_.begin(), queue_.end(), key); queued != queue_.end()) {
    queue_.erase(queued);  // prefetched but not started: the reader needs it first
    queue_.push_front(key);
  }
  const std::shared_ptr<Block> block = it->second;
  queueAhead(object, index);
  if (!block->ready) {
    ++counters_.waited;
    ready_.wait(lock, [&] { return block->ready; });
  }
  block->read = true;
  block->lastUse = ++clock_;
  if (block->error) {
    auto failed = blocks_.find(key);
    if (failed != blocks_.end() && failed->second == block) blocks_.erase(failed);  // a later read asks again
    std::rethrow_exception(block->error);
  }
  return block;
}

void RemoteReadahead::startFetchers() {
  if (fetchers_.empty())
    for (int t = 0; t < std::max(options_.threads, 1); ++t) fetchers_.emplace_back([this] { fetchLoop(); });
}

void RemoteReadahead::queueAhead(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index) {
  for (int k = 1; k <= options_.ahead; ++k)
    if (!queueBack(object, index + static_cast<std::uint64_t>(k))) return;
}

void RemoteReadahead::prefetch(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  startFetchers();
  queueBack(object, index);
}

bool RemoteReadahead::queueBack(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index) {
  if (index * options_.blockBytes >= object->size()) return false;
  const Key key{object.get(), index};
  if (blocks_.count(key)) return true;
  if (!makeRoom()) return false;
  auto block = std::make_shared<Block>();
  block->object = object;
  block->lastUse = ++clock_;
  blocks_.emplace(key, std::move(block));
  queue_.push_back(key);
  work_.notify_one();
  return true;
}

bool RemoteReadahead::adopt(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index, ByteVector& bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Key key{object.get(), index};
  if (blocks_.count(key)) return false;
  auto block = std::make_shared<Block>();
  block->object = object;
  block->bytes = std::move(bytes);
  block->ready = true;
  block->adopted = true;
  block->lastUse = ++clock_;
  blocks_.emplace(key, std::move(block));
  ++counters_.adopted;
  return true;
}

bool RemoteReadahead::makeRoom() {
  if (blocks_.size() < static_cast<std::size_t>(options_.maxBlocks)) return true;
  // Blocks already read go first, least recently used. A block prefetched and never read goes
  // once the last read of its object lay past it (the reader skipped it); blocks ahead of the
  // reader stay until read.
  auto victim = blocks_.end();
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    const Block& b = *it->second;
    const auto last = lastIndex_.find(it->first.first);
    const bool skipped = last != lastIndex_.end() && it->first.second < last->second;
    if (!b.ready || !(b.read || skipped)) continue;
    if (victim == blocks_.end() || b.lastUse < victim->second->lastUse) victim = it;
  }
  // Else an adopted block not read yet, the last adopted first: adopted in the order the reads
  // were expected to come, they may never come (an epoch other than the one foreseen), and held
  // for good they would leave no room for the blocks the reads do ask for.
  if (victim == blocks_.end())
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second->adopted && !it->second->read && (victim == blocks_.end() || it->second->lastUse > victim->second->lastUse))
        victim = it;
  if (victim == blocks_.end()) return false;
  if (onEvict_ && !victim->second->error)
    onEvict_(*victim->second->object, victim->first.second, victim->second->bytes.data(), victim->second->bytes.size());
  // Its buffer is fetched into again unless a reader is still copying from it (then the reader's
  // reference frees it): a fresh 4 MiB buffer per block cost a page fault per 4 KiB.
  if (victim->second.use_count() == 1) spare_.push_back(std::move(victim->second->bytes));
  blocks_.erase(victim);
  return true;
}

void RemoteReadahead::fetchLoop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Key key = queue_.front();
    queue_.pop_front();
    auto it = blocks_.find(key);
    if (it == blocks_.end()) continue;
    const std::shared_ptr<Block> block = it->second;
    ByteVector bytes;
    if (!spare_.empty()) {
      bytes = std::move(spare_.back());
      spare_.pop_back();
    }
    lock.unlock();
    const RemoteObject& object = *block->object;
    const std::uint64_t at = key.second * options_.blockBytes;
    bytes.resize(static_cast<std::size_t>(std::min<std::uint64_t>(options_.blockBytes, object.size() - at)));
    std::exception_ptr error;
    try {
      PartOptions one;  // the block in one request: the fetchers are the parallelism
      one.partSize = static_cast<std::int64_t>(options_.blockBytes);
      one.maxInflight = 1;
      object.read(at, bytes.data(), bytes.size(), one);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    block->bytes = std::move(bytes);
    block->error = error;
    block->ready = true;
    ++counters_.fetched;
    ready_.notify_all();
  }
}

}  // namespace stoker
