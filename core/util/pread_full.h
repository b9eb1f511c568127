// util/pread_full: pread until `n` bytes are in or the file ends, retrying EINTR and short reads.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace stoker {

// Bytes read (fewer than `n` only at the end of the file), or -1 with errno set on an error.
inline long long preadFull(int fd, void* dst, std::size_t n, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  return static_cast<long long>(done);
}

}  // namespace stoker
