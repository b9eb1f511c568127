// data/datasets/wds_read_plan: what a rank of a remote WebDataset still has to read, epoch by
// epoch, and the samples kept from readahead blocks dropped before the shuffle buffer emitted
// them. A shuffle buffer of N emits samples from far behind its front (after 3N samples 5 % of an
// entry's chances remain), so the blocks it needs cannot all stay whole: 5,000 photos in 100
// shards fetched 17x their bytes in an epoch before, 1.3x over three epochs with this.
//
// The loader draws epoch e + 1's order when epoch e starts, and its workers may begin e + 1 before
// e's last batch (and never read a tail drop_last cuts): the reads, which carry their epoch,
// decide which epoch is read now. A sample is kept while the epoch read now, or the one before,
// has a read of it to come. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace stoker {

class WdsReadPlan {
 public:
  // Where each sample lies: its shard and the bytes a read of it covers ([lo, hi); empty for a
  // sample that is never read from the network, a bad one). Samples of a shard are consecutive,
  // shard s's from shardBegin[s] to shardBegin[s + 1].
  struct Span {
    std::uint64_t lo = 0, hi = 0;
  };
  WdsReadPlan(std::vector<Span> spans, std::vector<std::int64_t> shardBegin);

  // An epoch's order drawn for this rank and, per shard, the shard after it in the rank's deal
  // (-1 at its end). An epoch drawn again replaces its plan (and those after it); another epoch
  // than the next one drawn is a new start: the plans go, and what was kept stays only while the
  // new plans still read it.
  void planned(const std::vector<std::int64_t>& order, std::int64_t epoch, std::vector<std::int64_t> nextShard);
  // Of the `count` shards after `shard` in the deal of the epoch read now, those whose first
  // `firstBlock` bytes hold a sample still to be read and not kept: the blocks worth fetching
  // ahead. A shard the shuffle buffer already drew from lies behind the reads as often as ahead,
  // and once its block was dropped what is left of it is kept: prefetched again, it was fetched
  // for nothing and held unread (100 shards with readahead_mb=64 fetched 143 blocks an epoch for 71).
  std::vector<std::int64_t> shardsAfter(std::int64_t shard, int count, std::uint64_t firstBlock) const;
  // A block of `shard` ([start, start + n)) is being dropped: keep each sample lying whole in it
  // that is still to be read.
  void keepFrom(std::int64_t shard, std::uint64_t start, const std::uint8_t* bytes, std::size_t n);
  // Copies [offset, offset + n) of sample `index` from what was kept; false when not kept.
  bool readKept(std::int64_t index, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const;
  // Epoch `epoch` has these reads left, and only these (stopped between batches, it goes on from
  // them: what was read for batches dropped unserved is read again).
  void rest(std::int64_t epoch, const std::int64_t* indices, std::int64_t count);
  // Sample `index` was read for `epoch`.
  void read(std::int64_t index, std::int64_t epoch);
  std::size_t keptSamples() const;

 private:
  struct Plan {
    std::int64_t epoch = 0;
    std::vector<std::int64_t> nextShard;
    std::vector<std::uint16_t> left;  // per sample: its reads still to come in this epoch
  };
  struct Kept {
    std::uint64_t start = 0;  // where the bytes begin in the shard
    std::vector<std::uint8_t> bytes;
  };
  const Plan* planOf(std::int64_t epoch) const;  // under mutex_; null when not drawn
  const Plan* planReadNow() const;               // under mutex_
  bool stillToRead(std::int64_t index) const;    // under mutex_

  const std::vector<Span> spans_;
  const std::vector<std::int64_t> shardBegin_;
  mutable std::mutex mutex_;
  std::deque<Plan> plans_;
  std::int64_t readingEpoch_ = -1;  // the latest epoch a read was for
  std::unordered_map<std::int64_t, Kept> kept_;
};

}  // namespace stoker
