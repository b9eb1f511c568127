// data/datasets/wds_kept_scans: the folder where the scans of remote WebDataset shards are kept,
// each as the shard's DALI index, so that a later open -- the next run of the script, another rank
// of the node -- reads a few KiB instead of downloading the shard again to find its tar headers.
//
// Which folder (`scan_cache=` in a wds: spec):
// - `scan_cache=DIR`: that folder; `scan_cache=off`: none (every open scans);
// - else cache_dir, beside the parts, when the loader has one;
// - else the user's cache (util/user_cache_dir), `wds-scans/`, kept under kUserCacheLimit (the
//   least recently used go first), so a dataset scanned once is not downloaded again at the next
//   open even without cache_dir. Without it a job restarted ten times downloaded its shards ten
//   times before its first batch.
// A scan is named by its object's identity (xxh3 of URL, ETag and size, RemoteObject::cacheId): a
// shard replaced on the server is scanned again, a shard without an ETag is not kept. Keeping is an
// economy: a folder that cannot be made or written costs the next open its scans and is said in the
// open's notes, never an error.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace stoker {

struct DatasetSpec;

class WdsKeptScans {
 public:
  // The user's cache keeps at most this many bytes of scans (an ImageNet-sized dataset's, 1.28 M
  // samples, is about 110 MB).
  static constexpr std::uint64_t kUserCacheLimit = std::uint64_t(1) << 30;

  // The folder `spec` and the loader's cache_dir say; null with scan_cache=off or no folder at all.
  static std::shared_ptr<WdsKeptScans> of(const DatasetSpec& spec, const std::string& cacheDir);

  WdsKeptScans(std::string dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {}
  const std::string& dir() const { return dir_; }
  std::uint64_t limit() const { return limit_; }  // 0: no limit (cache_dir, a folder the user named)
  std::string pathOf(const std::string& cacheId) const { return dir_ + "/" + cacheId + ".wds.idx"; }
  // Makes the folder (once; false when it cannot be, the reason kept for problem()): before the
  // scans, so that ranks opening together can lock their shards in it.
  bool makeFolder();
  // Which scan of the object at `url` was kept last (its cacheId; "" when none is noted): read
  // before the shard is opened, so that a shard without one is opened with its first block, as
  // its scan wants, and one with one without it. A small file per URL, `<xxh3 of url>.wds.last`.
  std::string lastPathOf(const std::string& url) const;
  std::string lastScanOf(const std::string& url) const;
  void noteLast(const std::string& url, const std::string& cacheId);
  // A kept scan read: marked as used now, so the trim takes it last.
  static void touch(const std::string& path);
  // Writes a scan (whole or not at all); a failure is remembered for problem(), and costs only a
  // later open's scan.
  void keep(const std::string& path, const std::string& text);
  // Past the limit, the least recently used scans (and notes of the last) go, down to 90 % of it;
  // so do temporary files of processes that died while writing. Called once an open has kept its
  // scans.
  void trim() const;
  // The first failure to keep a scan ("" when none).
  std::string problem() const;

 private:
  std::string dir_;
  std::uint64_t limit_;
  mutable std::mutex mutex_;
  bool tried_ = false, made_ = false;  // makeFolder ran; the folder exists
  std::string problem_;
};

}  // namespace stoker
