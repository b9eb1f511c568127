// util/file_lock: an exclusive advisory lock on a file (flock), held while the object lives, so
// that processes sharing a folder (ranks of a node sharing cache_dir) do a piece of work once: the
// first takes the lock and does it, the others wait and then find it done. The kernel drops the
// lock when its holder dies, so a killed rank never blocks the others for good.
//
// The lock file is removed when the lock is let go, so a cache folder does not collect one empty
// file per piece of work. That is safe because a taker checks, once it holds the lock, that the
// path still names the file it locked: a waiter woken on a file its holder has just removed
// (or that another taker has since created anew) takes the lock again on what the path names now.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "util/progress.h"

namespace stoker {

class FileLock {
 public:
  // Creates `path` when missing and waits for the lock. held() is false when the file could not be
  // opened (a read-only folder): the caller then goes on unlocked, as a lock is only an economy.
  // With `cancel`, the wait polls it every 50 ms and throws Error(Cancelled) naming `subject` once
  // it is cancelled: the holder may be another process scanning a shard of GBs, and Stop or Ctrl-C
  // of this one waited until that scan ended.
  // With `maxWait` above zero, a wait that lasts longer gives up: held() is false and the caller
  // goes on unlocked (the holder may be a process stopped in a debugger).
  explicit FileLock(std::string path, const CancelToken* cancel = nullptr, const std::string& subject = {},
                    std::chrono::milliseconds maxWait = std::chrono::milliseconds(0))
      : path_(std::move(path)) {
    const auto giveUpAt = std::chrono::steady_clock::now() + maxWait;
    for (;;) {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) return;
      int rc;
      if (cancel || maxWait.count() > 0) {
        while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && (errno == EWOULDBLOCK || errno == EINTR)) {
          if (cancel && cancel->cancelled()) {
            ::close(fd_);
            fd_ = -1;
            cancel->throwIfCancelled(subject.empty() ? path_ : subject);
          }
          if (maxWait.count() > 0 && std::chrono::steady_clock::now() >= giveUpAt) {
            ::close(fd_);
            fd_ = -1;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      } else {
        while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
        }
      }
      struct stat locked {}, named {};
      if (rc == 0 && ::fstat(fd_, &locked) == 0 && ::stat(path_.c_str(), &named) == 0 && locked.st_dev == named.st_dev &&
          locked.st_ino == named.st_ino)
        return;
      ::close(fd_);
      fd_ = -1;
      if (rc != 0) return;  // flock refused (not EINTR): go on unlocked
    }
  }
  ~FileLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());  // while still held: no one holds the path's file without checking it
    // Let go explicitly: a child forked while the lock was held shares the open file, and closing
    // only this descriptor would leave the lock held for as long as the child lives.
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace stoker
