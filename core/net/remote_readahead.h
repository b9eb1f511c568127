// net/remote_readahead: reads of remote objects served from aligned blocks fetched ahead of the
// reader, the way the kernel's readahead serves a file -- for work that walks objects mostly in
// order (a checkpoint conversion reads each shard's tensors one after another).
//
// Without it, every read waits a round trip: a conversion of 8 MiB tensors from a server 50 ms
// away ran at 0.09 GB/s, where downloading the shards first and converting after reached 0.42
// (0.63 GB/s with it).
// Here a read of block b also queues blocks b+1..b+ahead of the same object; `threads` fetchers
// keep that many one-block range requests in flight, so the reader waits on bandwidth, not latency.
//
// Memory is bounded by `maxBlocks` blocks (plus those being copied out): blocks already read go
// first, least recently used, then unread ones the reader has passed; when every block held is
// still ahead of its reader, nothing more is prefetched.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "util/byte_vector.h"

namespace stoker {

class RemoteObject;

// The defaults measured best on loopback behind a proxy adding 10 and 50 ms per request
// (tests/bench/remote_ckpt_bench.py): 4 MiB blocks lost to downloading first at 50 ms (0.85x),
// 8 MiB won (1.21x), 16 MiB won a little more for 224 MiB held; 16 fetchers instead of 8 gained
// 8 % at 50 ms (with 12 blocks ahead, more fetchers mostly wait).
struct ReadaheadOptions {
  std::uint64_t blockBytes = 8 << 20;
  int ahead = 12;      // blocks queued past the one read
  int maxBlocks = 20;  // held at once, across every object: 160 MiB
  int threads = 8;     // requests in flight
};

class RemoteReadahead {
 public:
  explicit RemoteReadahead(ReadaheadOptions options = {});
  ~RemoteReadahead();  // stops the fetchers (a fetch in flight finishes first)
  RemoteReadahead(const RemoteReadahead&) = delete;
  RemoteReadahead& operator=(const RemoteReadahead&) = delete;

  // Exactly `n` bytes at `offset` of `object` (which must outlive this). Errors of the fetch that
  // brought a block (Error(Network), Error(BadInput) for an object changed since it was opened)
  // are thrown here, to the reader that needs the block.
  // `fromElsewhere`, when given, is asked under the readahead's lock when a block of the range is
  // not held: true when it copied the whole range from somewhere else -- what onEvict kept of a
  // block dropped between the caller's own look and this read -- and the read is done. Without it
  // a reader that found nothing kept, then waited for the lock while another thread's prefetching
  // dropped the block, fetched it again (100 shards under readahead_mb=64: 34 such fetches in an
  // epoch, none with it).
  void read(const std::shared_ptr<const RemoteObject>& object, void* dst, std::uint64_t n, std::uint64_t offset,
            const std::function<bool()>& fromElsewhere = {});
  // Queues block `index` of `object` behind what is queued, unless it is held, queued or there is
  // no room: for a caller that knows which object its reader turns to next (a WebDataset rank's
  // next shard), where reading in order within one object cannot tell.
  void prefetch(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index);
  // Called with a block's bytes as the block is dropped to make room, under the readahead's lock
  // (keep it short): for a caller that keeps what it still needs of them (a WebDataset's shuffle
  // buffer reaches far back). Set before the first read.
  using EvictFn = std::function<void(const RemoteObject& object, std::uint64_t index, const std::uint8_t* bytes, std::size_t n)>;
  void onEvict(EvictFn fn) { onEvict_ = std::move(fn); }
  // Takes block `index` of `object` already fetched by someone else (a WebDataset's scan brought
  // each shard's first part), as if prefetched: held until read, then evicted like any other. The
  // caller bounds what it hands over: adopted blocks may hold more than maxBlocks until read. When
  // no block read or skipped is left to evict, an adopted one not read yet goes (the last adopted
  // first), so reads that never come to them do not stop the prefetching. False, `bytes` left
  // alone, when held already.
  bool adopt(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index, ByteVector& bytes);

  struct Counters {
    std::uint64_t fetched = 0;  // blocks brought
    std::uint64_t adopted = 0;  // blocks taken from adopt()
    std::uint64_t waited = 0;   // blocks a reader had to wait for (not there yet when asked)
    std::uint64_t held = 0;     // blocks held now
  };
  Counters counters() const;

 private:
  using Key = std::pair<const RemoteObject*, std::uint64_t>;
  struct Block {
    std::shared_ptr<const RemoteObject> object;
    ByteVector bytes;  // filled by the fetch: never zeroed first
    bool ready = false;
    bool read = false;  // a reader copied from it
    bool adopted = false;  // from adopt(), not fetched here
    std::exception_ptr error;
    std::uint64_t lastUse = 0;
  };
  // Null when the block is not held and fromElsewhere served the read.
  std::shared_ptr<Block> demand(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index,
                                const std::function<bool()>& fromElsewhere);
  void queueAhead(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index);
  bool queueBack(const std::shared_ptr<const RemoteObject>& object, std::uint64_t index);  // under mutex_: false when full
  void startFetchers();  // under mutex_
  bool makeRoom();  // under mutex_: false when every block held is unread or in flight
  void fetchLoop();

  const ReadaheadOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable ready_, work_;
  std::map<Key, std::shared_ptr<Block>> blocks_;
  std::deque<Key> queue_;  // blocks to fetch: what a reader waits for at the front
  std::map<const RemoteObject*, std::uint64_t> lastIndex_;  // the block each object was last read at
  std::vector<ByteVector> spare_;  // buffers of evicted blocks, fetched into again
  std::vector<std::thread> fetchers_;  // started by the first read
  EvictFn onEvict_;
  bool stop_ = false;
  std::uint64_t clock_ = 0;
  Counters counters_;
};

}  // namespace stoker
