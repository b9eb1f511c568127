// data/datasets/web_dataset: wds:SHARDS -- WebDataset tar shards, `DIR/train-{000000..000099}.tar`
// (a brace range, zero padding kept) or a glob. A sample is the run of tar members sharing a key
// (the path up to the first dot of the file name, as webdataset's base_plus_ext): `<key>.jpg|jpeg|png|webp|tif|tiff|bmp`
// plus `<key>.cls` (the label as text: digits, blanks around), suffixes compared lower-cased and a
// suffix twice in one sample refused, as webdataset's group_by_keys. Options: `wds:SHARDS,shuffle=N`
// (the shuffle buffer, 1000 by default; 0 keeps tar order), `index=dali` (or `index=dali:DIR`, the
// indexes in a folder of their own), `readahead_mb=N` (1024), `scan_cache=DIR|off` (where remote
// shards' scans are kept for the next open: by default cache_dir, else the user's cache). A pattern expands to at most 1,000,000
// shards. A shard that is not a tar stops the open; a sample that makes no sense (no image or
// .cls, a bad .cls, a sparse member) does too, unless skip_bad_samples keeps it to be skipped and
// counted when read.
//
// Opening scans every shard's headers with libarchive (telling the opener's OpenProgressScope how
// far it is, and stopping when it is cancelled: a remote shard's scan at its next read), or with
// `,index=dali` reads each shard's DALI index (<shard>.idx, see WebDatasetOptions::daliIndex) and
// opens a remote shard only when dealt.
// Ranks opening together may share the scans of remote shards (WebDatasetOptions::shareScans):
// each scans its own first deal's (or, where the planner deals samples, every world-th shard) and
// takes the others' indexes from an all-gather.
// Either way each member's byte range is known (the scan skips the data and reads only .cls
// files; from an index a .cls is read with its image), so a worker reads an image with one pread (the
// shard opened for it: no descriptors are held between reads). Shards in S3 or behind HTTP(S)
// (`wds:s3://bucket/train-{000..099}.tar`, `wds:https://host/...`; an s3:// glob is matched
// against the bucket's listing) are scanned max_inflight_parts x workers at a time (at most 32),
// each as a stream of aligned blocks of part_size bytes (data/datasets/wds_remote_stream; with a
// cache, the cached parts read in place). A loader reading in the dataset's own order without a
// cache gets whole blocks of part_size fetched ahead of its reads (within a shard, and the next
// shards of the rank's deal), the first epoch starting from the blocks of its first deal's shards
// that the scan brought (kept within readahead_mb); otherwise (a cache, or a plan dealing single
// samples) each batch's images are fetched as many at a time as max_inflight_parts parts of
// part_size hold (readsInFlight, by the mean sample; with a cache max_inflight_parts, as each may
// bring a whole part), one range read each, and
// decoded in order as they arrive -- in the first epoch of a plan dealing samples, those in blocks
// this rank's scan brought are copied from them instead (readScannedBlocks). The
// epoch's order is the dataset's own (ownEpochOrder): shards shuffled by (seed + epoch), dealt
// round-robin to the ranks of a distributed sampler, read shard after shard, samples mixed within
// a bounded buffer (webdataset's shuffle(N)), seeded and reproducible -- so each rank reads its
// shards sequentially and every sample is seen once per epoch across ranks. Ranks take equal
// steps, as with DistributedSampler: with drop_last every rank stops at the smallest rank's count
// (the rest of the larger ranks' shards waits for another epoch's deal), without it the smaller
// ranks repeat their first samples; fewer shards than ranks is refused.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "data/datasets/image_dataset.h"
#include "data/datasets/wds_kept_scans.h"
#include "data/datasets/wds_read_plan.h"
#include "data/datasets/wds_remote_stream.h"
#include "net/remote_object.h"
#include "net/remote_readahead.h"
#include "util/open_progress.h"

namespace stoker {

// How the loader deals shards to ranks (WebDataset::ownEpochOrder): each epoch's shard order
// shuffled by (seed + epoch) unless not shuffled, shard k of it to rank k % world.
struct ShardDeal {
  std::uint64_t seed = 0;
  bool shuffle = true;
  int rank = 0, world = 1;
  static ShardDeal of(const LoaderOptions& options);
};

// One remote shard's scan, as ranks hand it to each other (WebDatasetOptions::shareScans): the
// shard (its number and URL), the object it was made of (size, ETag) and its DALI index. An empty
// index says the others must scan the shard themselves: it could not be indexed (a bad sample) or
// its index could not travel (member names that are not UTF-8).
struct ScannedShard {
  std::int64_t shard = 0;
  std::string url;
  std::uint64_t size = 0;
  std::string etag, index;
};
// An all-gather among the ranks of a job: given this rank's scans, every rank's (its own included).
using ScanExchange = std::function<std::vector<ScannedShard>(const std::vector<ScannedShard>& mine)>;
// Which shards a rank scans when ranks share scans but the loader deals it no shards (deal.world
// == 1: `stoker feed`, whose planner deals samples, every rank opening the whole dataset): rank r
// of `world` scans shards r, r + world, r + 2 world, ...
struct ScanSplit {
  int rank = 0, world = 1;
};

struct WebDatasetOptions {
  std::int64_t shuffleBuffer = 1000;
  // skip_bad_samples: a sample that makes no sense (no image or .cls, a bad .cls) is kept and fails
  // when read, so the loader skips and counts it; otherwise opening refuses it.
  bool keepBadSamples = false;
  PartOptions parts;  // how remote shards are read (part_size, max_inflight_parts)
  int workers = 1;    // the loader's: max_inflight_parts is per worker, so the open may use parts x workers
  // `index=dali`: read each shard's DALI index (<shard>.idx, as wds2idx writes it) instead of
  // scanning the shard; a .cls is then read with its image.
  bool daliIndex = false;
  // `index=dali:DIR`: the indexes are DIR/<shard's index name> (local, s3:// or http(s)://), as
  // `stoker dataset index --out-dir DIR` writes them; empty: beside each shard.
  std::string indexDir;
  bool keepComponents = false;  // keep every member's range (to write DALI indexes)
  // Where remote shards' scans are kept for later opens (`scan_cache=DIR|off`, else cache_dir, else
  // the user's cache; see data/datasets/wds_kept_scans); null: every open scans.
  std::shared_ptr<WdsKeptScans> keptScans;
  // `readahead_mb=N`: at most this many bytes of remote blocks held (without a cache).
  std::uint64_t readaheadBytes = std::uint64_t(1) << 30;
  // The loader's deal: without a cache the scan keeps the blocks it brought only for the shards
  // this rank reads in epoch 0, not every rank's.
  ShardDeal deal;
  // Ranks that share their scans (no index=dali, deal.world > 1 or split.world > 1): each scans
  // only the remote shards of its own epoch-0 deal -- the ones it reads first, whose scanned blocks
  // it keeps for that epoch -- or of its split, and takes the others' indexes from this exchange,
  // so N ranks together fetch the shards once to open them instead of N times. A shard no rank
  // could index is scanned by each. Called once, by every rank, after its own scans: a rank whose
  // scan, listing (an s3:// glob) or cache_dir failed calls it too, with what it has, then throws,
  // so the others do not wait in it. What fails on one rank before the open (its transforms, its
  // options) must not, or the others wait. Where scans are kept (keptScans), indexes taken from it are kept there as this rank's
  // own scans are. Empty: every rank scans every shard.
  ScanExchange shareScans;
  ScanSplit split;  // who scans what when the deal does not say (deal.world == 1)
};

class WebDataset : public EncodedImageDataset {
 public:
  WebDataset(const std::string& spec, std::vector<std::string> shards, const std::string& transforms, WebDatasetOptions options);
  std::int64_t size() const override { return static_cast<std::int64_t>(samples_.size()); }
  std::optional<std::vector<std::int64_t>> ownEpochOrder(const LoaderOptions& options, std::int64_t epoch) const override;
  std::optional<std::int64_t> ownEpochLength(const LoaderOptions& options, std::int64_t epoch) const override;
  void ownEpochRest(std::int64_t epoch, const std::int64_t* indices, std::int64_t count) const override;
  bool hasOwnEpochOrder() const override { return true; }
  // Remote shards scanned without a cache: what the open downloaded, and how much of it the first
  // epoch reads instead of fetching it again.
  std::vector<std::string> openNotes() const override;
  const std::vector<std::string>& shards() const { return shards_; }
  // Bytes of the blocks the scan brought that are held for this rank's first epoch.
  std::uint64_t scannedBlockBytes() const {
    std::lock_guard<std::mutex> lock(blocksMutex_);
    return blocksBytes_;
  }
  std::uint64_t shardBytes() const;  // all shards' sizes together (from an index: up to their last member's end)
  std::int64_t shardOf(std::int64_t index) const { return samples_[static_cast<std::size_t>(index)].shard; }
  const std::string& key(std::int64_t index) const { return samples_[static_cast<std::size_t>(index)].key; }
  // Shard `shard`'s DALI index (v1.2: "v1.2 N", then a line per sample of "ext offset size name"
  // per member), for a dataset opened with keepComponents.
  std::string daliIndexText(std::int64_t shard) const;

 protected:
  void fetch(std::int64_t index, std::int64_t epoch, std::vector<std::uint8_t>& bytes, std::int64_t& label,
             std::string& name) const override;

 private:
  // An epoch's shards dealt to ranks, and the samples every rank serves in it (equalised).
  struct EpochDeal {
    ShardDeal deal;
    std::vector<std::int64_t> shardOrder;
    std::int64_t perRank = 0;
  };
  EpochDeal epochDealOf(const LoaderOptions& options, std::int64_t epoch) const;
  struct Sample {
    std::int64_t shard = 0;
    std::string key;
    std::uint64_t offset = 0, size = 0;  // the image member's data in its shard
    std::int64_t label = 0;
    // From an index: the .cls member's data, read with the image (label is set then).
    std::uint64_t clsOffset = 0, clsSize = 0;
    bool labelAtRead = false;
    std::string problem;  // a bad sample's reason (kept only under skip_bad_samples)
  };
  struct Component {
    std::string ext;  // as in the member's name
    std::uint64_t offset = 0, size = 0;
    std::string name;
  };
  struct Member;  // a tar member, from the scan or an index
  // `indexText`: set to the shard's DALI index when an index would open the same samples.
  // `progress` (may be null): told the shard's size and how far the scan is in it.
  void scan(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText = nullptr,
            OpenProgressMeter::Piece* progress = nullptr);
  // A remote shard's scan read from where scans are kept (keptScans), or made and kept there.
  void scanThroughCache(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText = nullptr,
                        OpenProgressMeter::Piece* progress = nullptr);
  // The scan of `url` noted as kept last (WdsKeptScans::lastScanOf), read before the shard is
  // opened: its cacheId when its index is there, else "".
  std::string notedKeptScan(const std::string& url) const;
  // The kept scan of `object` (shard's, opened), when there is one that fits it; else false.
  // `noted`: what the URL's note said when the caller read it (null: read it here), so that a
  // scan kept without a note is noted.
  bool readKeptScan(std::int64_t shard, const RemoteObject& object, const std::string* noted, std::vector<Sample>& out,
                    std::uint64_t& size, std::string* indexText, OpenProgressMeter::Piece* progress);
  // The kept scan of a shard whose note names one (openShards' first pass): opened alone, without
  // a block for a scan; false when none fits (the shard is scanned later, within the knobs' bound).
  bool openKeptScan(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText,
                    OpenProgressMeter::Piece* progress);
  // Another rank's scan of `shard` (shareScans); false when its index does not parse or does not fit.
  bool adoptPeerScan(const ScannedShard& scanned, std::vector<Sample>& out);
  // Where scans are kept: the adopted scans written there as the node's own (scanThroughCache).
  void keepPeerScans(const std::vector<const ScannedShard*>& theirs) const;
  std::string keptIndexPath(const std::string& cacheId) const;
  // Opens every shard: scanned, read from indexes, or (shareScans) partly from the other ranks.
  // On the opener's thread: its OpenProgressScope hears how far the scans are and may cancel them.
  void openShards();
  // Groups consecutive members by key into samples, as webdataset does.
  void group(std::int64_t shard, const std::vector<Member>& members, std::vector<Sample>& out) const;
  void readIndex(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size);
  // A DALI index's members (`path` names it in errors); returns where the last member's bytes end.
  std::uint64_t parseIndex(std::int64_t shard, const std::string& text, const std::string& path, std::vector<Member>& members);
  static std::string daliIndexTextOf(const std::vector<Component>& components);
  // The remote shard's object, opened on first use (from an index, a shard is opened when a rank
  // first reads it); null for a local shard.
  // `takeHead`: when this call opens it, the open's request also brings the first `headBytes`,
  // handed to the caller (the scan's first window).
  std::shared_ptr<const RemoteObject> objectOf(std::int64_t shard, ByteVector* takeHead = nullptr,
                                               std::size_t headBytes = 1) const;
  // From an index: whether fetch reads sample `s`'s image and .cls as one span [lo, hi) (they lie
  // together, as tar writers put them).
  static bool readsTogether(const Sample& s, std::uint64_t& lo, std::uint64_t& hi);
  void readSpan(const Sample& s, std::int64_t epoch, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const;
  void startReadahead();
  // The readahead's blocks: part_size, at least 64 KiB (what a scan's blocks must be to be kept).
  std::uint64_t readaheadBlockBytes() const {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(options_.parts.partSize, 64 << 10));
  }
  // What a shard's scan hands the blocks it passed to (into `kept`, within readahead_mb): null when
  // they are not kept (a cache, another rank's shard in epoch 0, blocks not the readahead's).
  WdsRemoteStream::KeepFn keeperOf(std::int64_t shard, std::vector<std::pair<std::uint64_t, ByteVector>>& kept);
  // After the scan: `samples` are the shard's.
  void keepScannedBlocks(std::int64_t shard, std::vector<std::pair<std::uint64_t, ByteVector>> kept,
                         const std::vector<Sample>& samples);
  std::vector<bool> firstDeal_;  // the shards this rank reads in epoch 0 (keeperOf keeps theirs)
  std::vector<std::int64_t> firstDealOrder_;  // the same, in the order it reads them (the scans' order)
  // The first order drawn: the blocks kept of `dealtShards` become readahead blocks; every other
  // is dropped.
  void adoptScannedBlocks(const std::vector<std::int64_t>& dealtShards) const;
  void dropScannedBlocks() const;  // every block held; the caller holds blocksMutex_
  // A plan dealing single samples (no order of the dataset's own): the first epoch's read takes the
  // image from the held blocks of its shard when they hold it; false: fetch it. A block goes once
  // it served each of the samples in it, and every block at the first read of another epoch.
  bool readScannedBlocks(std::int64_t shard, std::int64_t epoch, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const;
  void readRemote(const Sample& s, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const;
  std::vector<std::string> shards_;
  WebDatasetOptions options_;
  mutable std::vector<std::shared_ptr<const RemoteObject>> remote_;  // per shard: null when local or not opened yet
  std::unique_ptr<std::once_flag[]> opened_;                          // per shard: remote_ set
  std::vector<bool> isRemote_;
  std::vector<std::uint64_t> shardSizes_;
  // Per shard, the ETag another rank's scan was made of (shareScans): the object opened later must
  // still be that one. Empty: this rank scanned it, or it came from an index.
  std::vector<std::string> peerScanEtags_;
  std::vector<bool> peerScanned_;
  int scanParallel_ = 1;  // shards scanned at once
  const CancelToken* openCancel_ = nullptr;  // while openShards runs: the opener's (util/open_progress)
  std::vector<Sample> samples_;
  std::vector<std::int64_t> shardBegin_;  // first sample of each shard, and the end
  std::vector<std::vector<Component>> components_;  // keepComponents: per shard, every member in order
  mutable std::mutex objectsMutex_;
  mutable std::unordered_map<const RemoteObject*, std::int64_t> shardOfObject_;  // the remote shards opened
  // Remote shards without a cache, read in the dataset's own order: blocks of part_size fetched
  // ahead (see readRemote), and what the epochs read now still need from blocks dropped. Null for
  // local shards and with a cache. The readahead comes after what its eviction hook uses, so it
  // (and its threads) goes first.
  std::unique_ptr<WdsReadPlan> plan_;
  std::unique_ptr<RemoteReadahead> readahead_;
  std::uint64_t blockBytes_ = 0;  // the readahead's
  mutable std::mutex blocksMutex_;
  struct ScannedBlock {
    ByteVector bytes;     // a block of the shard, from the scan
    std::int64_t unread;  // the samples in it not yet served from it (readScannedBlocks)
  };
  using ScannedBlocks = std::map<std::uint64_t, ScannedBlock>;  // by block index
  mutable std::unordered_map<std::int64_t, ScannedBlocks> scannedBlocks_;  // by shard
  mutable std::uint64_t blocksBytes_ = 0;
  mutable std::int64_t blocksEpoch_ = -1;  // the epoch readScannedBlocks serves (the first it was asked for)
  mutable std::atomic<bool> blocksKept_{false};
  std::atomic<std::uint64_t> scanDownloaded_{0};  // bytes of remote shards this rank scanned without a cache
  std::atomic<bool> scansNotKept_{false};  // a remote shard without an ETag was scanned (its scan is not kept)
  std::atomic<std::uint64_t> firstDealScanned_{0};  // of those, the shards it reads in epoch 0
  std::uint64_t keptAtOpen_ = 0;  // blocksBytes_ once every shard was scanned
  std::atomic<bool> keepRefused_{false};  // readahead_mb left a scanned block of this rank's out
  int aheadShards_ = 0;  // the next shards of the deal whose first block a rank's first read of a shard queues
  mutable std::atomic<bool> ownOrderDrawn_{false};  // the loader reads in ownEpochOrder's order
};

// Where DALI's wds2idx puts a shard's index by default: the shard's path up to the first dot of
// its file name (after its first character), then ".idx" (train-000000.tar -> train-000000.idx).
// With `dir`, that file name in the folder `dir` instead (index=dali:DIR).
std::string daliIndexPathOf(const std::string& shard, const std::string& dir = "");

// `stoker dataset index`: scans the shards of `spec` (wds:SHARDS) and writes each one's DALI index
// (v1.2, as wds2idx writes it) -- beside a local shard (daliIndexPathOf), or into `outDir` under
// the same file name (needed for remote shards: open them with index=dali:DIR, or upload the files
// beside the shards). Files are written whole or
// not at all. Returns the files written and the samples (lines) each lists.
struct WrittenIndex {
  std::string path;
  std::int64_t samples = 0;
};
std::vector<WrittenIndex> writeDaliIndexes(const std::string& spec, const std::string& outDir, const LoaderOptions& options);

// The shard paths of a SHARDS pattern: brace ranges {000..099} and lists {a,b} expand in order;
// otherwise a glob, sorted. Throws Error(BadInput) when nothing matches.
std::vector<std::string> expandShardPattern(const std::string& pattern);

std::shared_ptr<Dataset> openWebDataset(const std::string& spec, const LoaderOptions& options);
// The same for one rank of a job whose ranks open it together and share their scans through
// `shareScans` (WebDatasetOptions::shareScans; null: this rank scans every shard); `split` says
// which shards this rank scans when options deal it no shards of its own (ScanSplit).
std::shared_ptr<Dataset> openWebDataset(const std::string& spec, const LoaderOptions& options, ScanExchange shareScans,
                                        ScanSplit split = {});
// The same, to list (openDatasetToList): without transforms when options has none.
std::shared_ptr<Dataset> listWebDataset(const std::string& spec, const LoaderOptions& options);

}  // namespace stoker
