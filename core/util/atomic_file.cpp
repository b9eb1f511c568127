#include "util/atomic_file.h"

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <cstdlib>
#include <climits>
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "util/error.h"

namespace stoker {
namespace {

constexpr std::size_t kBufferBytes = 4 << 20;  // large writes go straight through
std::atomic<unsigned> gTempCounter{0};
std::atomic<std::uint64_t> gFaultWritten{0};

std::uint64_t envBytes(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return UINT64_MAX;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  return (end && *end == 0) ? n : UINT64_MAX;
}

// Returns how many of `n` bytes may still be written before the fault hook
// fires (ENOSPC), or kills the process (a crash: no destructor, no cleanup).
std::size_t allowedByFaultHook(std::size_t n) {
  static const std::uint64_t budget = faultEnospcBudget();
  static const std::uint64_t crashAt = envBytes("STOKER_FAULT_CRASH_AFTER");
  if (budget == UINT64_MAX && crashAt == UINT64_MAX) return n;
  std::uint64_t before = gFaultWritten.fetch_add(n);
  if (before + n > crashAt) ::raise(SIGKILL);
  if (budget == UINT64_MAX) return n;
  if (before >= budget) return 0;
  return static_cast<std::size_t>(std::min<std::uint64_t>(n, budget - before));
}

std::string directoryOf(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string baseNameOf(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::uint64_t faultEnospcBudget() { return envBytes("STOKER_FAULT_ENOSPC_AFTER"); }

namespace {
// This host's name as it can stand in a file name.
const std::string& temporaryHost() {
  static const std::string host = [] {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    std::string out;
    for (const char* c = name; *c && out.size() < 64; ++c)
      out += std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_' ? *c : '_';
    return out.empty() ? std::string("host") : out;
  }();
  return host;
}

// Whose a temporary ".<name>.stoker-tmp-<pid>-<n>.<host>" is, by the host after "<pid>-<n>."
// (searched from `afterPid`, where its pid ends). None: a name from before hosts were named.
enum class TemporaryHost { None, This, Another };
TemporaryHost temporaryHostOf(const std::string& name, std::size_t afterPid) {
  const auto dot = name.find('.', afterPid);
  if (dot == std::string::npos) return TemporaryHost::None;
  return name.compare(dot + 1, std::string::npos, temporaryHost()) == 0 ? TemporaryHost::This : TemporaryHost::Another;
}
}  // namespace

bool isTemporaryOfAnotherHost(const std::string& name) {
  const auto at = name.find(".stoker-tmp-");
  if (at == std::string::npos) return false;
  // Without a host: nobody can tell whose it is.
  return temporaryHostOf(name, name.find('-', at + 12)) != TemporaryHost::This;
}

bool isTemporaryLocked(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // a shared lock taken here goes with the descriptor
  return held;
}

bool isOrphanedTemporary(const std::string& pathOrName) {
  const std::string name = baseNameOf(pathOrName);
  const auto at = name.find(".stoker-tmp-");
  if (at == std::string::npos) return false;
  const char* p = name.c_str() + at + 12;
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(p, &end, 10);
  if (end == p || errno || pid <= 0 || pid > INT32_MAX || *end != '-') return false;
  // Another node's process cannot be asked whether it still runs.
  if (temporaryHostOf(name, static_cast<std::size_t>(end - name.c_str())) == TemporaryHost::Another) return false;
  if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) return false;
  return pathOrName.find('/') == std::string::npos || !isTemporaryLocked(pathOrName);
}

AtomicFile::AtomicFile(std::string finalPath) : finalPath_(std::move(finalPath)) {
  // The host in the name: on a file system that several nodes share, two processes of the same
  // pid write beside each other. O_EXCL: a name taken (by anyone) is never truncated under its
  // writer; the next counter is tried instead.
  for (int attempt = 0;; ++attempt) {
    tempPath_ = directoryOf(finalPath_) + "/." + baseNameOf(finalPath_) + ".stoker-tmp-" + std::to_string(::getpid()) +
                "-" + std::to_string(gTempCounter++) + "." + temporaryHost();
    // Read and write: a shared writable mapping (mapForWrite) needs both.
    fd_ = ::open(tempPath_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_EX | LOCK_NB);  // held while this writer lives: isOrphanedTemporary asks it
      return;
    }
    if (errno != EEXIST || attempt == 1000) throwIo(finalPath_, "cannot create temporary file", errno);
  }
}

AtomicFile::~AtomicFile() {
  if (mapped_) ::munmap(mapped_, mappedBytes_);
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tempPath_.c_str());
}

void AtomicFile::writeAll(const void* data, std::size_t n) {
  auto* p = static_cast<const std::uint8_t*>(data);
  const auto reserved = static_cast<std::size_t>(std::min<std::uint64_t>(n, reservedLeft_));
  reservedLeft_ -= reserved;
  const std::size_t allowed = reserved == n ? n : reserved + allowedByFaultHook(n - reserved);
  if (allowed < n) {
    if (allowed > 0 && ::write(fd_, p, allowed) < 0) throwIo(finalPath_, "write failed", errno);
    throwIo(finalPath_, "write failed", ENOSPC);
  }
  writeRaw(p, n);
}

// Starts write-back of what was written since the last call once 64 MiB have
// piled up, without waiting for it: the disk works while we copy, and the
// final fsync has little left to do (rather than one burst at the end).
void AtomicFile::startWriteback() {
  constexpr std::uint64_t kStep = 64ull << 20;
  const std::uint64_t onDisk = written_ - buffer_.size();
  if (onDisk - writebackFrom_ < kStep) return;
  ::sync_file_range(fd_, static_cast<off64_t>(writebackFrom_), static_cast<off64_t>(onDisk - writebackFrom_),
                    SYNC_FILE_RANGE_WRITE);
  writebackFrom_ = onDisk;
}

void AtomicFile::writeRaw(const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throwIo(finalPath_, "write failed", errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::flushBuffer() {
  if (buffer_.empty()) return;
  writeAll(buffer_.data(), buffer_.size());
  buffer_.clear();
  startWriteback();
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (committed_ || mapped_) throw Error(ErrorKind::Internal, finalPath_, "write after commit or mapForWrite");
  if (buffer_.size() + n > kBufferBytes) {
    flushBuffer();
    if (n >= kBufferBytes) {
      writeAll(data, n);
      written_ += n;
      startWriteback();
      return;
    }
  }
  auto* p = static_cast<const std::uint8_t*>(data);
  if (buffer_.capacity() == 0) buffer_.reserve(kBufferBytes);  // on first use: a mapped file never needs it
  buffer_.insert(buffer_.end(), p, p + n);
  written_ += n;
}

std::uint8_t* AtomicFile::mapForWrite(std::size_t n) {
  if (committed_ || written_ != 0 || mapped_) throw Error(ErrorKind::Internal, finalPath_, "mapForWrite on a file already written");
  if (allowedByFaultHook(n) < n) throwIo(finalPath_, "write failed", ENOSPC);
  written_ = n;
  if (n == 0) return nullptr;
  // posix_fallocate returns the error rather than setting errno. Where the file system cannot
  // reserve blocks, glibc writes a byte per block instead: still no hole left to fault on.
  if (const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(n)); rc != 0) throwIo(finalPath_, "write failed", rc);
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throwIo(finalPath_, "cannot map for writing", errno);
  mapped_ = p;
  mappedBytes_ = n;
  return static_cast<std::uint8_t*>(p);
}

void AtomicFile::writeThrough(const void* data, std::size_t n) {
  if (committed_ || mapped_) throw Error(ErrorKind::Internal, finalPath_, "write after commit or mapForWrite");
  flushBuffer();
  writeAll(data, n);
  written_ += n;
  startWriteback();
}

void AtomicFile::reserve(std::size_t n) {
  if (committed_ || mapped_) throw Error(ErrorKind::Internal, finalPath_, "reserve after commit or mapForWrite");
  if (allowedByFaultHook(n) < n) throwIo(finalPath_, "write failed", ENOSPC);
  reservedLeft_ += n;
  if (n == 0) return;
  const std::uint64_t from = written_;
  if (const int rc = ::posix_fallocate(fd_, static_cast<off_t>(from), static_cast<off_t>(n)); rc != 0)
    throwIo(finalPath_, "write failed", rc);
}

void AtomicFile::copyFrom(int srcFd, std::uint64_t offset, std::uint64_t n, const std::string& source) {
  if (committed_ || mapped_) throw Error(ErrorKind::Internal, finalPath_, "write after commit or mapForWrite");
  flushBuffer();
  if (allowedByFaultHook(n) < n) throwIo(finalPath_, "write failed", ENOSPC);
  auto in = static_cast<off64_t>(offset);
  std::uint64_t left = n;
  while (left > 0) {
    ssize_t w = ::copy_file_range(srcFd, &in, fd_, nullptr, left, 0);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // unsupported here or a short source: finish with read/write
    left -= static_cast<std::uint64_t>(w);
  }
  std::vector<std::uint8_t> chunk;
  while (left > 0) {
    chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(left, 1 << 20)));
    ssize_t r = ::pread(srcFd, chunk.data(), chunk.size(), in);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throwIo(source, "read failed while copying it to " + finalPath_, errno);
    if (r == 0) throw Error(ErrorKind::Io, source, "file ended early (was it changed during the conversion?)");
    writeRaw(chunk.data(), static_cast<std::size_t>(r));
    in += r;
    left -= static_cast<std::uint64_t>(r);
  }
  written_ += n;
  startWriteback();
}

bool AtomicFile::setAttribute(const char* name, const void* value, std::size_t n) {
  return !committed_ && fd_ >= 0 && ::fsetxattr(fd_, name, value, n, 0) == 0;
}

void AtomicFile::commit(bool durable) {
  if (committed_) return;
  flushBuffer();
  if (durable && ::fsync(fd_) != 0) throwIo(finalPath_, "fsync failed", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    throwIo(finalPath_, "close failed", errno);
  }
  fd_ = -1;
  if (::rename(tempPath_.c_str(), finalPath_.c_str()) != 0)
    throwIo(finalPath_, "cannot rename temporary file into place", errno);
  committed_ = true;
  if (!durable) return;
  // Make the rename itself durable.
  // A failure is said: the caller (a conversion's journal) records the file as done on it.
  int dfd = ::open(directoryOf(finalPath_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throwIo(finalPath_, "cannot open its folder to sync the rename", errno);
  if (::fsync(dfd) != 0 && errno != EINVAL) {  // EINVAL: a file system without directory sync
    const int err = errno;
    ::close(dfd);
    throwIo(finalPath_, "cannot sync its folder after the rename", err);
  }
  ::close(dfd);
}

}  // namespace stoker
