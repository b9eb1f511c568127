// util/read_only_fd: a file opened read-only, closed when it goes out of scope.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace stoker {

class ReadOnlyFd {
 public:
  // O_NONBLOCK: a FIFO named by hostile input (a sample's path, a .metadata's relative_path) must not
  // hang open(); callers refuse anything but a regular file after fstat. Regular files ignore it.
  explicit ReadOnlyFd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {}
  ~ReadOnlyFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadOnlyFd(const ReadOnlyFd&) = delete;
  ReadOnlyFd& operator=(const ReadOnlyFd&) = delete;
  int get() const { return fd_; }  // -1 when the open failed (errno says why)

 private:
  int fd_;
};

}  // namespace stoker
