// net/remote_object: an object in S3 or behind HTTP(S), read by byte ranges -- what a remote
// dataset's shards, token files and checkpoint headers are.
//
// open() costs one request: a GET of the first `headBytes` (at least 1) that also tells the
// size (Content-Range) and the ETag, and keeps those bytes (a safetensors header is read with
// one or two requests in all). read() splits a range into parts of `part_size` bytes and
// fetches at most `max_inflight_parts` of them at once, each on its own connection (reused
// from the process's pool), every part checked against the ETag seen at open.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_transfer.h"
#include "util/byte_vector.h"

namespace stoker {

class PartCache;
class MappedFile;

struct PartOptions {
  std::int64_t partSize = 8 << 20;
  int maxInflight = 4;
  // cache_dir: reads go through whole aligned parts kept on local disk (net/part_cache.h).
  std::shared_ptr<PartCache> cache;
};

// How many reads of `bytesEach` bytes each (an image, a token window) go at once: as many as
// max_inflight_parts parts of part_size hold, never fewer than max_inflight_parts, at most
// kMaxReadsInFlight. One small request is latency-bound: at 50 ms, 4 images in flight per worker
// read 80 a second, where the bytes of 4 parts would hold hundreds. With a cache a read may fetch
// a whole part, so it counts as one.
constexpr int kMaxReadsInFlight = 64;
int readsInFlight(const PartOptions& parts, std::uint64_t bytesEach);

// How many ranges one request may ask for (RemoteObject::readRanges): STOKER_HTTP_RANGES_PER_REQUEST,
// 64 by default (Apache serves 200 at most, and 64 ranges of a large file keep the Range header
// under 2 KiB, far from the 8 KiB a server takes); 1 reads every range with its own request.
int rangesPerRequest();

class RemoteObject {
 public:
  // Error(BadInput) for a URL that is not one, 403/404 and the like; Error(Io) when the server
  // could not be reached within the retry budget.
  // `s3`: the configuration to sign with, when the caller already loaded it (a dataset opening
  // thousands of objects reads the environment and the AWS files once); else loadS3Config().
  // `takeHead`: the first headBytes go to the caller instead of being kept, for a reader that
  // walks the object once from its start (a shard's scan): the open's request brings its first bytes.
  static std::shared_ptr<const RemoteObject> open(const std::string& url, std::size_t headBytes = 1,
                                                  const S3Config* s3 = nullptr, ByteVector* takeHead = nullptr);

  const std::string& url() const { return target_.display; }
  std::uint64_t size() const { return size_; }
  const std::string& etag() const { return etag_; }
  // What names this object's content in a cache (objectIdOf: URL, ETag, size); empty without an ETag.
  const std::string& cacheId() const { return cacheId_; }
  // The first bytes fetched by open() (fewer when the object is smaller).
  const ByteVector& head() const { return head_; }
  // The whole object, for a small one (an index, a checkpoint's metadata): the bytes open() kept
  // when they hold it all, else one read. Error(BadInput) "is larger than N MiB; not WHAT" past
  // `maxBytes`.
  std::string whole(std::uint64_t maxBytes, const std::string& what) const;

  // Error(BadInput) when [offset, offset + n) is not inside the object.
  void requireRange(std::uint64_t offset, std::uint64_t n) const;
  // Exactly `n` bytes at `offset` (Error(BadInput) past the end), in parallel parts. With a cache
  // (and an ETag to key it), whole aligned parts are fetched, kept and served from local disk.
  // `partDone` (may be empty) hears each part's bytes once they are in `dst`, on the thread that
  // fetched them; what it throws (a cancelled open) ends the read, no new part started.
  using PartDone = std::function<void(std::size_t bytes)>;
  void read(std::uint64_t offset, void* dst, std::size_t n, const PartOptions& parts = {}, const PartDone& partDone = {}) const;
  // The `n` bytes at `offset` without a copy where they lie in one part mapped from the cache;
  // else read into `scratch`. The pointer stays valid while this object lives (or until scratch changes).
  const std::uint8_t* bytesAt(std::uint64_t offset, std::size_t n, const PartOptions& parts, ByteVector& scratch) const;
  // With a cache: brings the parts holding [offset, offset + n) into it, max_inflight_parts at a
  // time, copying nothing out (a walk that reads them next through bytesAt). Without one, nothing.
  void cacheParts(std::uint64_t offset, std::uint64_t n, const PartOptions& parts) const;
  // Whether readRanges may be tried: an http(s):// object whose server has not declined it yet,
  // and rangesPerRequest() above 1. Not s3://: S3 serves one range per GET.
  bool servesRanges() const;
  // `ranges` (sorted by offset, not overlapping, at most rangesPerRequest(), inside the object) in
  // one request. False when the server declines several ranges at once (see httpGetRanges): then
  // servesRanges() is false from now on, and the caller reads them one each.
  bool readRanges(std::vector<ByteRange>& ranges) const;
  // How many ranges a request to this object asks for: rangesPerRequest(), or fewer once its server
  // served fewer in a reply (lighttpd: 10), so later batches ask for what it serves.
  int rangesPerRequest() const;
  // With a cache: fetch every part not kept yet in the background, max_inflight_parts at a time and
  // in order, so a first epoch of random reads waits on the network's bandwidth, not on one
  // request per worker at a time. Reads of a part being warmed wait for it; a warm-up that fails
  // stops quietly (the read that needs the part gets the error). Stopped and joined on destruction.
  void warmCache(const PartOptions& parts) const;
  ~RemoteObject();

 private:
  std::uint64_t tableFor(const PartOptions& parts) const;  // the part size, the table made on first use
  void readCached(std::uint64_t offset, std::uint8_t* out, std::size_t n, const PartOptions& parts, const PartDone& partDone) const;
  struct PartView {
    const MappedFile* bytes;
    std::shared_ptr<const MappedFile> hold;  // set when the part is in memory only (not kept)
  };
  PartView cachedPart(std::uint64_t index, std::uint64_t partSize, const PartOptions& parts) const;

  HttpTarget target_;
  std::uint64_t size_ = 0;
  std::string etag_;
  std::string cacheId_;  // objectIdOf: empty without an ETag
  ByteVector head_;
  // The parts this object already mapped from the cache, by index (for the first part size used):
  // a window read after the first costs one atomic load and a memcpy.
  mutable std::mutex partsMutex_;
  mutable std::once_flag tableOnce_;
  mutable std::uint64_t tablePartSize_ = 0;
  mutable std::unique_ptr<std::atomic<const MappedFile*>[]> table_;
  mutable std::vector<std::shared_ptr<const MappedFile>> tableOwned_;
  mutable std::shared_ptr<PartCache> heldIn_;  // the cache whose holdMapping() counts tableOwned_ (guarded by partsMutex_)
  mutable std::uint64_t heldBytes_ = 0;        // guarded by partsMutex_
  mutable std::vector<std::thread> warmers_;  // guarded by partsMutex_
  mutable std::atomic<bool> stopWarming_{false};
  mutable std::atomic<std::uint64_t> nextWarm_{0};
  mutable std::atomic<bool> rangesDeclined_{false};
  mutable std::atomic<int> rangesServed_{0};  // the fewest ranges a reply served of more asked; 0: none
};

// A local path mapped, or an s3:// / http(s):// file fetched whole in parallel parts into memory
// (tensor files: .safetensors and .npy datasets are held in memory anyway). The fetch, minutes for
// a file of GBs, tells the opener's OpenProgressScope how far it is and stops when it is cancelled.
std::shared_ptr<const MappedFile> mapOrFetch(const std::string& pathOrUrl, const PartOptions& parts = {});

// Where an http(s):// or s3:// URL is requested, signed as configured (s3: loadS3Config()).
HttpTarget targetOf(const std::string& url, const S3Config* s3 = nullptr);
// What the part cache calls the content of the object at `target` with this ETag and size
// (objectIdOf of where it is, without credentials); empty without an ETag.
std::string cacheIdOf(const HttpTarget& target, const std::string& etag, std::uint64_t size);

struct ListedObject {
  std::string url;  // s3://bucket/key
  std::uint64_t size = 0;
  std::string etag;  // as the listing gave it (the quotes included, as a GET's ETag header has them)
};

// ListObjectsV2 under s3://bucket/prefix, every page (continuation tokens). With `byFolder`, the
// listing stops at '/' (delimiter): `prefixes` gets the sub-folders as s3:// URLs ending in '/'.
// Keys come sorted by their bytes, as S3 returns them. STOKER_S3_LIST_MAX_KEYS sets the page size
// (S3's max-keys, 1000 by default).
// `pageDone` (may be empty) hears how many objects are listed after each page.
std::vector<ListedObject> listS3(const std::string& prefixUrl, bool byFolder, std::vector<std::string>* prefixes = nullptr,
                                 const std::function<void(std::size_t listed)>& pageDone = {});

}  // namespace stoker
