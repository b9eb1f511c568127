// net/part_cache: the local disk cache of remote objects' parts (cache_dir, cache_limit -- MosaicML
// Streaming's names). A remote object is cut into aligned parts of part_size bytes; a part read once
// is kept as one file and served from a read-only mapping on later reads, so a second epoch reads
// local pages, not the network.
//
// Why it is safe:
// - A part's file name is a hash of the object's URL, ETag and size plus the part size and index, so
//   an object changed on the server never serves old bytes (an object without an ETag is not cached).
// - A part is written under a temporary name and renamed into place (util/atomic_file, without
//   fsync: the cache is not the data's only copy). A killed process leaves no half part under a
//   part's name; a file whose size is not the part's is removed and fetched again.
// - Several processes (ranks on one node) may share a folder: they write under their own temporary
//   names, a rename replaces an equal file, and a part removed by another process's eviction stays
//   readable through the mapping that already holds it.
// - Without fsync a power cut can keep the rename and lose the bytes: the part has its size but
//   zeros (its blocks were reserved) or stale pages. So each part carries the XXH3 of its bytes, the
//   host and the boot that wrote it as an extended attribute (metadata: it reaches the disk with the
//   rename), and a part this host wrote in an earlier boot is checked against it when first mapped
//   (then marked checked for this boot), and fetched again when it differs. Parts of other hosts
//   (NFS: closed, so on the server, before their rename) and parts without the attribute (a file
//   system without user xattrs) are not checked; STOKER_CACHE_VERIFY=always checks every part
//   that has one.
// - A part missed by several processes at once is fetched by one (`<part>.lock`, util/file_lock);
//   the others wait for its file (Stop ends the wait; a holder slower than two minutes is not
//   waited for).
// - cache_limit: when the parts exceed it, the least recently used are removed (a part's
//   modification time is set when a process first maps it) until they fill 90 % of it.
// - A full disk (ENOSPC) costs no sample: the part is served from memory, the failure is counted
//   and said once on stderr.
#pragma once

#include <cstdint>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "net/http_transfer.h"  // ByteSink

namespace stoker {

class Error;
class MappedFile;

struct PartCacheCounters {
  std::uint64_t hits = 0;           // parts mapped from the folder
  std::uint64_t misses = 0;         // parts fetched
  std::uint64_t bytesWritten = 0;   // into the folder
  std::uint64_t evicted = 0;        // parts removed by this process for cache_limit
  std::uint64_t writeFailures = 0;  // parts that could not be written (disk full...)
  std::uint64_t damaged = 0;        // parts whose bytes failed their checksum: fetched again
};

class PartCache {
 public:
  // The cache of `dir` in this process (one per folder; created when missing). `limitBytes` 0: no limit.
  // Error(Io) when the folder cannot be created or written.
  static std::shared_ptr<PartCache> at(const std::string& dir, std::uint64_t limitBytes);

  struct Part {
    std::shared_ptr<const MappedFile> bytes;
    bool onDisk = false;  // false: the folder could not take it (disk full), the bytes are in memory
  };
  // The bytes of one part: mapped from the folder, or fetched by `fetch` (which fills `bytes` bytes)
  // and stored. Threads asking for a part another thread is fetching wait for that fetch (and get
  // its error); processes sharing the folder wait for one another's fetch too (`<part>.lock`, an
  // flock) and then map its file. `objectId`: what identifies the object's content (objectIdOf).
  Part part(const std::string& objectId, std::uint64_t partSize, std::uint64_t index,
                                         std::size_t bytes, const std::function<void(std::uint8_t*)>& fetch);
  // As part(), for a fetch that hands the bytes over in order as they arrive (httpGetRange's sink):
  // they reach the file in 2 MiB write()s, whose page cache the kernel keeps in 2 MiB folios where
  // it can (Linux >= 6.16 on ext4, xfs), so a mapping of the part gets huge pages as a local file
  // read in order does -- random reads from the cache then cost what they cost locally (a token
  // epoch from 4 KiB pages ran at 0.77-0.80x local). Written through a shared mapping, the same
  // bytes came in 4 KiB pages, and faulted one page at a time.
  Part streamedPart(const std::string& objectId, std::uint64_t partSize, std::uint64_t index, std::size_t bytes,
                    const std::function<void(const ByteSink&)>& fetch);

  // Mappings that objects keep for their life count against cache_limit. An evicted part's disk
  // blocks stay allocated while a mapping holds it, so objects that kept every part they read held
  // a dataset larger than the limit on disk whole (past the limit, until the disk was full). Past
  // the limit, holdMapping() is false and the part serves the read that fetched it only.
  bool holdMapping(std::uint64_t bytes);
  void releaseMapping(std::uint64_t bytes);
  std::uint64_t heldBytes() const { return held_.load(); }

  const std::string& dir() const { return dir_; }
  std::uint64_t limit() const { return limit_; }
  PartCacheCounters counters() const;

  PartCache(std::string dir, std::uint64_t limit);

 private:
  std::string fileOf(const std::string& objectId, std::uint64_t partSize, std::uint64_t index) const;
  std::shared_ptr<const MappedFile> mapIfThere(const std::string& path, std::size_t bytes);
  // The part at `path` mapped if it is there, else made by `store` -- once, however many threads ask.
  Part once(const std::string& path, std::size_t bytes, const std::function<Part()>& store);
  Part fetchAndStore(const std::string& path, std::size_t bytes, const std::function<void(std::uint8_t*)>& fetch);
  Part streamAndStore(const std::string& path, std::size_t bytes, const std::function<void(const ByteSink&)>& fetch);
  void noteStored(std::size_t n);             // counts the bytes; evicts past cache_limit
  void noteWriteFailure(const Error& e);  // counts it; says the first one on stderr
  std::uint64_t scan(bool evict);

  std::string dir_;
  std::uint64_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_future<Part>> inflight_;  // guarded by mutex_
  PartCacheCounters counters_;                                          // guarded by mutex_
  bool saidFull_ = false;                                               // guarded by mutex_
  std::mutex evictMutex_;
  std::atomic<std::uint64_t> approxBytes_{0};  // the folder's parts as last scanned, plus this process's writes
  std::atomic<std::uint64_t> sinceScan_{0};    // this process's writes since the folder was last scanned
  std::atomic<std::uint64_t> held_{0};         // bytes of the parts objects keep mapped (holdMapping)
};

// The identity of an object's content for the cache: where it is (without credentials), its ETag
// and its size, hashed. Empty when the object has no ETag (it cannot be cached safely).
std::string objectIdOf(const std::string& locator, const std::string& etag, std::uint64_t size);

}  // namespace stoker
