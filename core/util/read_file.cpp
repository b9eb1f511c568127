#include "util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/byte_size.h"
#include "util/error.h"
#include "util/pread_full.h"

namespace stoker {
namespace {

// O_NONBLOCK: a FIFO named like an image must not hang the worker in open(); the file-type check
// then refuses it.
class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    if (fd_ < 0) throw Error(ErrorKind::Io, path, std::strerror(errno));
  }
  ~OpenFile() { ::close(fd_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::size_t readAt(const OpenFile& f, std::uint64_t offset, void* dst, std::size_t n, const std::string& subject) {
  const long long got = preadFull(f.fd(), dst, n, offset);
  if (got < 0) throw Error(ErrorKind::Io, subject, std::strerror(errno));
  return static_cast<std::size_t>(got);
}

}  // namespace

void readWholeFile(const std::string& path, std::size_t maxBytes, std::vector<std::uint8_t>& out) {
  OpenFile f(path);
  struct stat st {};
  if (::fstat(f.fd(), &st) != 0 || !S_ISREG(st.st_mode)) throwBadInput(path, "not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > maxBytes)
    throwBadInput(path, "larger than " + formatMiB(static_cast<std::int64_t>(maxBytes)) + ", the most one sample may be");
  out.resize(static_cast<std::size_t>(st.st_size));
  out.resize(readAt(f, 0, out.data(), out.size(), path));
}

std::size_t readFileRange(const std::string& path, std::uint64_t offset, void* dst, std::size_t n,
                          const std::string& subject) {
  OpenFile f(path);
  return readAt(f, offset, dst, n, subject.empty() ? path : subject);
}

}  // namespace stoker
