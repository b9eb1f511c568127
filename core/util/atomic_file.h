// util/atomic_file: write a file under a temporary name and only rename it to
// its final name after fsync, so a crash, a cancel or a full disk never leaves
// a half-written file that looks complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

// True for an AtomicFile temporary whose writer has died: a process of this host that no longer
// runs (a temporary of another host's process, on a shared file system, is not). Given a path
// (not a bare name), also false while a writer holds the temporary's lock: every AtomicFile holds
// an flock on its temporary while it lives, so a writer in another PID namespace (a container
// sharing the folder), whose pid this process cannot see, is known to be alive.
bool isOrphanedTemporary(const std::string& pathOrName);
// A temporary named for another host, or for none (a name from before hosts were named).
bool isTemporaryOfAnotherHost(const std::string& fileName);
// Whether a writer holds the lock of the temporary at `path` (false when it cannot be told).
bool isTemporaryLocked(const std::string& path);

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.stoker-tmp-<pid>-<n>.<host>" next to `finalPath` (a new file: a
  // name that exists already is never reused).
  explicit AtomicFile(std::string finalPath);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Buffered append; throws Error(Io) on failure (ENOSPC included).
  void write(const void* data, std::size_t n);
  // The same, straight to write(2): for a writer that gathers its own pieces (their size is what
  // the page cache's folios are made of).
  void writeThrough(const void* data, std::size_t n);
  // Appends `n` bytes of another file starting at `offset`, inside the kernel
  // (copy_file_range; read/write where the file systems cannot).
  // A failed or short read names `source` (the output is not what broke).
  void copyFrom(int srcFd, std::uint64_t offset, std::uint64_t n, const std::string& source);
  // The whole file as `n` writable bytes, for a writer that fills them in place (a network fetch
  // straight into a cache file: no copy through a buffer and write()). The file's blocks are
  // reserved first, so a full disk fails here with Error(Io) ENOSPC, never later as SIGBUS.
  // Only on a file with nothing written yet; the bytes stay mapped until destruction (readable
  // after commit()). Subject to the fault hooks below like write().
  std::uint8_t* mapForWrite(std::size_t n);
  // Reserves the blocks of the next `n` bytes to be written (posix_fallocate), so that a full disk
  // fails here with Error(Io) ENOSPC -- before a network fetch whose bytes are written as they
  // arrive -- and not in a write() halfway. Those bytes pass the fault hooks here, not when written.
  void reserve(std::size_t n);
  std::uint64_t bytesWritten() const { return written_; }
  // Sets an extended attribute of the file (before commit()): false where the file system takes
  // none (ENOTSUP, a full xattr block), for callers that treat it as a hint -- it is metadata, so
  // it reaches the disk with the rename, unlike data written without fsync.
  bool setAttribute(const char* name, const void* value, std::size_t n);

  // Flushes, fsyncs, renames to the final name and fsyncs the directory. `durable` false skips
  // both fsyncs: still never a half file under the final name after a killed process, but not
  // proof against a power cut (for copies that can be fetched again, such as cached parts).
  void commit(bool durable = true);

  const std::string& finalPath() const { return finalPath_; }
  const std::string& tempPath() const { return tempPath_; }

 private:
  void flushBuffer();
  void writeAll(const void* data, std::size_t n);
  void writeRaw(const std::uint8_t* data, std::size_t n);  // no fault hook
  void startWriteback();
  std::uint64_t writebackFrom_ = 0;

  std::string finalPath_;
  std::string tempPath_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
  std::uint64_t reservedLeft_ = 0;  // bytes reserve() let through the fault hooks, not yet written
  std::vector<std::uint8_t> buffer_;
  void* mapped_ = nullptr;  // mapForWrite's bytes
  std::size_t mappedBytes_ = 0;
};

// Test hook: with STOKER_FAULT_ENOSPC_AFTER=<bytes> in the environment, every
// AtomicFile in the process fails with ENOSPC ("No space left on device") once
// that many bytes were written in total -- a full disk, without a full disk.
// STOKER_FAULT_CRASH_AFTER=<bytes> kills the process with SIGKILL instead: a
// crash that leaves its temporary files behind, as a power cut would.
std::uint64_t faultEnospcBudget();

}  // namespace stoker
