#include "util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/byte_size.h"
#include "util/error.h"
#include "util/pread_full.h"
#include "util/read_only_fd.h"

namespace stoker {
namespace {

// Opens `path` or throws Error(Io) with the system's reason.
class OpenFile : public ReadOnlyFd {
 public:
  explicit OpenFile(const std::string& path) : ReadOnlyFd(path) {
    if (get() < 0) throw Error(ErrorKind::Io, path, std::strerror(errno));
  }
  int fd() const { return get(); }
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
