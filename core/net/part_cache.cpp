#include "net/part_cache.h"

#include <xxhash.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <vector>

#include "util/atomic_file.h"
#include "util/byte_vector.h"
#include "util/ends_with.h"
#include "util/error.h"
#include "util/file_lock.h"
#include "util/lru_folder.h"
#include "util/mapped_file.h"
#include "util/open_progress.h"

namespace stoker {
namespace {

constexpr const char* kSuffix = ".part";
constexpr const char* kSumAttribute = "user.stoker.xxh3";  // "<XXH3-64, 16 hex digits> <host> <boot id>"

std::string hexOf(std::uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

// This machine and this boot: /proc/sys/kernel/random/boot_id changes at every boot (a UUID), and
// the host name tells this machine's parts from other nodes' in a shared folder.
const std::string& thisBoot() {
  static const std::string boot = [] {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    in >> id;
    std::string out = std::string(host) + " " + (id.empty() ? "unknown" : id);
    for (char& c : out)
      if (c == '\0' || c == '\n') c = '_';
    return out;
  }();
  return boot;
}

// The checksum a part was written with ("<16 hex digits> <host> <boot id>"): empty when it has
// none (a file system without user xattrs), `sum` and whether it must be checked otherwise. A
// part must be checked when this machine wrote it in an earlier boot (a power cut may have come
// between its rename and its bytes reaching the disk), or when the user asks for every check. A
// part another node wrote was closed there before its rename, which on NFS sends its bytes to the
// server first: not checked. A part written in this boot is in the page cache as written.
bool mustCheck(const std::string& path, std::string& sum) {
  char kept[512] = {};
  const ssize_t n = ::getxattr(path.c_str(), kSumAttribute, kept, sizeof kept - 1);
  if (n < 17) return false;  // none: nothing to check against
  const std::string value(kept, static_cast<std::size_t>(n));
  sum = value.substr(0, 16);
  const char* verify = std::getenv("STOKER_CACHE_VERIFY");
  if (verify && std::strcmp(verify, "always") == 0) return true;
  const std::string writer = value.substr(17);
  const std::string& mine = thisBoot();
  const std::string myHost = mine.substr(0, mine.rfind(' '));
  return writer != mine && writer.substr(0, writer.rfind(' ')) == myHost;
}

std::string sumAttribute(std::uint64_t sum) { return hexOf(sum) + " " + thisBoot(); }

void keepSum(AtomicFile& file, std::uint64_t sum) {
  const std::string value = sumAttribute(sum);
  file.setAttribute(kSumAttribute, value.data(), value.size());  // none taken: such a part is never checked
}

}  // namespace

std::string objectIdOf(const std::string& locator, const std::string& etag, std::uint64_t size) {
  if (etag.empty()) return {};
  const std::string text = locator + '\n' + etag + '\n' + std::to_string(size);
  return hexOf(XXH3_64bits(text.data(), text.size()));
}

std::shared_ptr<PartCache> PartCache::at(const std::string& dir, std::uint64_t limitBytes) {
  static std::mutex registryMutex;
  static std::unordered_map<std::string, std::shared_ptr<PartCache>> registry;  // for the process's life
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throwIo(dir, "cache_dir cannot be created", ec.value());
  if (::access(dir.c_str(), W_OK) != 0) throwIo(dir, "cache_dir is not writable", errno);
  const std::string key = std::filesystem::weakly_canonical(dir).string();
  std::lock_guard<std::mutex> lock(registryMutex);
  auto& cache = registry[key];
  if (!cache || cache->limit_ != limitBytes) cache = std::make_shared<PartCache>(key, limitBytes);
  return cache;
}

PartCache::PartCache(std::string dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {
  approxBytes_ = scan(false);
}

std::string PartCache::fileOf(const std::string& objectId, std::uint64_t partSize, std::uint64_t index) const {
  return dir_ + "/" + objectId + "-" + std::to_string(partSize) + "-" + std::to_string(index) + kSuffix;
}

bool PartCache::holdMapping(std::uint64_t bytes) {
  std::uint64_t was = held_.load();
  do {
    if (limit_ != 0 && was + bytes > limit_) return false;
  } while (!held_.compare_exchange_weak(was, was + bytes));
  return true;
}

void PartCache::releaseMapping(std::uint64_t bytes) { held_ -= bytes; }

PartCacheCounters PartCache::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

std::shared_ptr<const MappedFile> PartCache::mapIfThere(const std::string& path, std::size_t bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return nullptr;
  if (static_cast<std::uint64_t>(st.st_size) != bytes) {
    ::unlink(path.c_str());  // not this part (a power cut before the data reached the disk): fetch again
    return nullptr;
  }
  try {
    auto map = MappedFile::open(path);
    if (map->size() != bytes) return nullptr;
    if (std::string sum; mustCheck(path, sum)) {
      if (hexOf(XXH3_64bits(map->data(), map->size())) != sum) {
        // Removed unless another process has since put a good part in its place (the same inode,
        // still: it is the file read here).
        struct stat now {};
        if (::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) ::unlink(path.c_str());
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.damaged;
        return nullptr;
      }
      // Its bytes were read back from the disk and match: checked for this boot, not again.
      const std::string value = sumAttribute(std::strtoull(sum.c_str(), nullptr, 16));
      ::setxattr(path.c_str(), kSumAttribute, value.data(), value.size(), 0);
    }
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: the last to be evicted
    return map;
  } catch (const Error&) {
    return nullptr;  // removed by another process's eviction in between: fetch it
  }
}

void PartCache::noteWriteFailure(const Error& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.writeFailures;
  if (!saidFull_) {
    saidFull_ = true;
    std::fprintf(stderr, "stoker: cache_dir %s: %s; parts that do not fit are read from the network, not kept\n",
                 dir_.c_str(), e.what());
  }
}

void PartCache::noteStored(std::size_t n) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.bytesWritten += n;
  }
  if (limit_ == 0) return;
  // Other processes (the node's other ranks) write to the folder too, and their bytes show only in
  // a scan: so the folder is scanned again after every eighth of the limit this process wrote, not
  // only once its own count passes the limit (8 ranks filled the folder to 8x the limit).
  const std::uint64_t since = sinceScan_ += n;
  if ((approxBytes_ += n) > limit_ || since > limit_ / 8) {
    std::lock_guard<std::mutex> lock(evictMutex_);
    const std::uint64_t before = approxBytes_.load();
    if (before > limit_ || sinceScan_.load() > limit_ / 8) {
      sinceScan_ = 0;
      // Stores finishing during the scan add after it began: keep their bytes (counted twice at
      // worst, which only brings the next scan sooner), never overwrite them.
      const std::uint64_t total = scan(true);
      approxBytes_ += total - before;  // modular: a decrease when the scan removed parts
    }
  }
}

// The parts in the folder, in bytes; with `evict`, after removing the least recently used ones down
// to 90 % of the limit. Temporary files of processes that died long ago go too.
std::uint64_t PartCache::scan(bool evict) {
  LruFolder parts = LruFolder::read(dir_, {kSuffix});
  if (!evict || limit_ == 0 || parts.total <= limit_) return parts.total;
  const std::uint64_t removed = parts.trimTo(limit_ / 10 * 9);
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.evicted += removed;
  return parts.total;
}

PartCache::Part PartCache::part(const std::string& objectId, std::uint64_t partSize, std::uint64_t index, std::size_t bytes,
                                const std::function<void(std::uint8_t*)>& fetch) {
  const std::string path = fileOf(objectId, partSize, index);
  return once(path, bytes, [&] { return fetchAndStore(path, bytes, fetch); });
}

PartCache::Part PartCache::streamedPart(const std::string& objectId, std::uint64_t partSize, std::uint64_t index,
                                        std::size_t bytes, const std::function<void(const ByteSink&)>& fetch) {
  const std::string path = fileOf(objectId, partSize, index);
  return once(path, bytes, [&] { return streamAndStore(path, bytes, fetch); });
}

PartCache::Part PartCache::once(const std::string& path, std::size_t bytes, const std::function<Part()>& store) {
  std::promise<Part> mine;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = inflight_.find(path);
    if (it != inflight_.end()) {
      std::shared_future<Part> other = it->second;
      lock.unlock();
      return other.get();  // the fetching thread's part, or its error
    }
    inflight_.emplace(path, mine.get_future().share());
  }
  const auto done = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.erase(path);
  };
  try {
    Part out;
    std::optional<FileLock> fetching;
    if (!(out.bytes = mapIfThere(path, bytes))) {
      // The node's other ranks miss the same parts at the same time (random token windows): the
      // first takes the part's lock and fetches, the others wait for it and map its file, so the
      // node downloads each part once. A holder that dies or fails lets the next one fetch.
      // Stop and Ctrl-C end the wait (an open's cancel); a holder that takes more than two minutes
      // (stopped in a debugger) is not waited for.
      fetching.emplace(path + ".lock", currentOpenProgress().cancel, path, std::chrono::minutes(2));
      out.bytes = mapIfThere(path, bytes);
    }
    if (out.bytes) {
      out.onDisk = true;
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.hits;
    } else {
      out = store();
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.misses;
    }
    mine.set_value(out);
    done();
    return out;
  } catch (...) {
    mine.set_exception(std::current_exception());
    done();
    throw;
  }
}

// The fetch writes straight into the part's file, mapped (one copy, from the socket's buffer into
// the page cache): through a buffer and write() each byte was copied twice more and each page of
// the buffer faulted (5,000 photos in 100 shards: half the run's page faults). Where the folder
// cannot take the part (cache_limit below it, a full disk), the fetch fills memory instead.
PartCache::Part PartCache::fetchAndStore(const std::string& path, std::size_t bytes, const std::function<void(std::uint8_t*)>& fetch) {
  std::unique_ptr<AtomicFile> file;
  std::uint8_t* into = nullptr;
  if (limit_ == 0 || bytes <= limit_) {  // else it would evict itself
    try {
      file = std::make_unique<AtomicFile>(path);
      into = file->mapForWrite(bytes);
    } catch (const Error& e) {
      noteWriteFailure(e);
      file.reset();
    }
  }
  Part out;
  if (file) {
    fetch(into);  // an error: the temporary file goes with `file`
    keepSum(*file, XXH3_64bits(into, bytes));
    try {
      file->commit(false);
      noteStored(bytes);
      if ((out.bytes = mapIfThere(path, bytes))) {
        out.onDisk = true;
        return out;
      }
    } catch (const Error& e) {
      noteWriteFailure(e);
    }
    // Not in place after all (the rename failed, or another process's eviction took it at once):
    // the bytes are still mapped here.
    out.bytes = MappedFile::fromBytes(path, std::vector<std::uint8_t>(into, into + bytes));
    return out;
  }
  std::vector<std::uint8_t> data(bytes);
  fetch(data.data());
  out.bytes = MappedFile::fromBytes(path, std::move(data));
  return out;
}

// Written as it arrives, in 2 MiB pieces: whole huge folios of page cache (see streamedPart). The
// blocks are reserved first, so a full disk is found before the fetch, which then fills memory.
// A write that fails anyway (an I/O error) costs a second fetch, into memory.
PartCache::Part PartCache::streamAndStore(const std::string& path, std::size_t bytes,
                                          const std::function<void(const ByteSink&)>& fetch) {
  constexpr std::size_t kPiece = std::size_t(2) << 20;  // x86-64's and arm64's (4 KiB pages) huge page
  std::unique_ptr<AtomicFile> file;
  if (limit_ == 0 || bytes <= limit_) {  // else it would evict itself
    try {
      file = std::make_unique<AtomicFile>(path);
      file->reserve(bytes);
    } catch (const Error& e) {
      noteWriteFailure(e);
      file.reset();
    }
  }
  Part out;
  if (file) {
    thread_local ByteVector piece;  // one a fetching thread (workers, warm-up threads): 2 MiB each
    piece.resize(kPiece);
    std::size_t filled = 0, arrived = 0;
    // The sum of the bytes as they arrive (each once, in order: a retry resumes).
    const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> sum(XXH3_createState(), XXH3_freeState);
    if (!sum) throw std::bad_alloc();
    XXH3_64bits_reset(sum.get());
    std::optional<Error> diskFailure;
    const auto writePiece = [&] {
      try {
        file->writeThrough(piece.data(), filled);
      } catch (const Error& e) {
        diskFailure = e;
        throw;
      }
      filled = 0;
    };
    try {
      fetch([&](const std::uint8_t* data, std::size_t n) {
        arrived += n;
        XXH3_64bits_update(sum.get(), data, n);
        while (n > 0) {
          const std::size_t take = std::min(n, kPiece - filled);
          std::memcpy(piece.data() + filled, data, take);
          filled += take;
          data += take;
          n -= take;
          if (filled == kPiece) writePiece();
        }
      });
      if (filled > 0) writePiece();
      // The file was reserved at its full size: committed short, its unwritten tail would pass
      // every later size check and be served as the part's bytes.
      if (arrived != bytes)
        throw Error(ErrorKind::Network, path, "the part's fetch ended after " + std::to_string(arrived) + " of " + std::to_string(bytes) + " bytes");
      keepSum(*file, XXH3_64bits_digest(sum.get()));
      // Mapped before the rename: the bytes stay readable here if it fails, or if another process's
      // eviction removes the part at once.
      out.bytes = MappedFile::open(file->tempPath());
      try {
        file->commit(false);
        noteStored(bytes);
        out.onDisk = true;
      } catch (const Error& e) {
        noteWriteFailure(e);  // this read is served from the mapping, the next fetches again
      }
      return out;
    } catch (const Error&) {
      if (!diskFailure) throw;  // the network's error (or the server's): the reader's
      noteWriteFailure(*diskFailure);
    }
  }
  std::vector<std::uint8_t> data(bytes);
  std::size_t at = 0;
  fetch([&](const std::uint8_t* p, std::size_t n) {
    std::memcpy(data.data() + at, p, n);
    at += n;
  });
  out.bytes = MappedFile::fromBytes(path, std::move(data));
  return out;
}

}  // namespace stoker
