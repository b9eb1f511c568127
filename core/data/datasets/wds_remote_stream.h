// data/datasets/wds_remote_stream: a remote WebDataset shard as libarchive's input, for the
// shard's scan (WebDataset::scan walks every member header once, from the start).
//
// Without a cache the shard is fetched in aligned blocks of max(part_size, 4 KiB),
// max_inflight_parts at a time, each its own buffer, and libarchive is handed one block per read.
// A skip (the data of a member the scan does not read) moves on without fetching the blocks it
// passes whole. A block the scan is done with goes to `keep` -- the first epoch reads it instead
// of fetching it again -- or back to the stream's spare buffers. The blocks being aligned is what
// lets them be kept: they are the readahead's blocks (one-part shards were the only ones kept,
// and a larger shard was downloaded twice in the first epoch).
//
// With a cache, the cached parts are read in place (mapped; nothing is copied).
//
// A network error is kept for the scan to rethrow as it came: libarchive would only say
// "truncated", and the retry budget's Error(Io) stays an Io error.
#pragma once

#include <archive.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <vector>

#include "net/remote_object.h"
#include "util/byte_vector.h"
#include "util/progress.h"

namespace stoker {

class WdsRemoteStream {
 public:
  // Offered each block the scan has passed, whole and in the order passed: true when it took
  // `bytes` (moved from). Not called with a cache.
  using KeepFn = std::function<bool(std::uint64_t index, ByteVector& bytes)>;

  // `head`: the object's first bytes, brought by its open (empty when it brought none); when it is
  // block 0, it is served first.
  // `cancel` (may be null): polled before each read, so a scan stops within a shard (the open's
  // token, util/open_progress).
  WdsRemoteStream(const RemoteObject& object, const PartOptions& parts, ByteVector head, KeepFn keep,
                  const CancelToken* cancel = nullptr);
  WdsRemoteStream(const WdsRemoteStream&) = delete;
  WdsRemoteStream& operator=(const WdsRemoteStream&) = delete;

  // The blocks' size for `parts`: max(part_size, 4 KiB), as RemoteObject's parts (and the open's
  // head the scan asks for, which is block 0).
  static std::uint64_t blockBytesFor(const PartOptions& parts) {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(parts.partSize, 4096));
  }
  // Sets libarchive's read and skip callbacks on `a` (before archive_read_open1).
  void attach(archive* a);
  void rethrowIfFailed() const {
    if (error_) std::rethrow_exception(error_);
  }
  // The scan succeeded: the blocks fetched and not passed yet (the tar's end) go to `keep` too.
  void finish();

 private:
  struct Block {
    std::uint64_t index = 0;
    ByteVector bytes;
  };
  static la_ssize_t readCallback(archive*, void* self, const void** buffer);
  static la_int64_t skipCallback(archive*, void* self, la_int64_t request);
  la_ssize_t readBlocks(const void** buffer);
  la_ssize_t readCachedParts(const void** buffer);
  void fetchFrom(std::uint64_t index);  // the next max_inflight_parts blocks from `index`, in parallel
  void retire(Block& b);               // to keep_, else to spare_

  const RemoteObject& object_;
  const PartOptions parts_;
  const std::uint64_t block_;
  KeepFn keep_;  // cleared once it refuses a block (its budget is spent)
  const CancelToken* cancel_;
  std::uint64_t at_ = 0;  // the object's next byte libarchive has not had
  std::deque<Block> fetched_;  // fetched, not handed to libarchive yet, in order
  Block handed_;  // the block libarchive reads now: retired at its next read
  std::vector<ByteVector> spare_;  // buffers of blocks dropped, fetched into again
  ByteVector scratch_;  // with a cache: a read across parts not mapped
  std::uint64_t cachedTo_ = 0;  // with a cache: the parts before this byte are in it
  std::exception_ptr error_;
};

}  // namespace stoker
