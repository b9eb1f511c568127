// util/file_lock: an exclusive advisory lock on a file (flock), held while the object lives, so
// that processes sharing a folder (ranks of a node sharing cache_dir) do a piece of work once: the
// first takes the lock and does it, the others wait and then find it done. The kernel drops the
// lock when its holder dies, so a killed rank never blocks the others for good.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

namespace stoker {

class FileLock {
 public:
  // Creates `path` when missing and waits for the lock. held() is false when the file could not be
  // opened (a read-only folder): the caller then goes on unlocked, as a lock is only an economy.
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) return;
    int rc;
    while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace stoker
