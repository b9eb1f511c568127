#include "util/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "util/error.h"

namespace stoker {
namespace {

constexpr std::size_t kBufferBytes = 4 << 20;  // large writes go straight through
std::atomic<unsigned> gTempCounter{0};

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

AtomicFile::AtomicFile(std::string finalPath) : finalPath_(std::move(finalPath)) {
  tempPath_ = directoryOf(finalPath_) + "/." + baseNameOf(finalPath_) + ".stoker-tmp-" +
              std::to_string(::getpid()) + "-" + std::to_string(gTempCounter++);
  fd_ = ::open(tempPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throwIo(finalPath_, "cannot create temporary file", errno);
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tempPath_.c_str());
}

void AtomicFile::writeAll(const void* data, std::size_t n) {
  auto* p = static_cast<const std::uint8_t*>(data);
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
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (committed_) throw Error(ErrorKind::Internal, finalPath_, "write after commit");
  if (buffer_.size() + n > kBufferBytes) {
    flushBuffer();
    if (n >= kBufferBytes) {
      writeAll(data, n);
      written_ += n;
      return;
    }
  }
  auto* p = static_cast<const std::uint8_t*>(data);
  buffer_.insert(buffer_.end(), p, p + n);
  written_ += n;
}

void AtomicFile::commit() {
  if (committed_) return;
  flushBuffer();
  if (::fsync(fd_) != 0) throwIo(finalPath_, "fsync failed", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    throwIo(finalPath_, "close failed", errno);
  }
  fd_ = -1;
  if (::rename(tempPath_.c_str(), finalPath_.c_str()) != 0)
    throwIo(finalPath_, "cannot rename temporary file into place", errno);
  committed_ = true;
  // Make the rename itself durable.
  int dfd = ::open(directoryOf(finalPath_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace stoker
