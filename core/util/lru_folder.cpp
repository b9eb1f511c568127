#include "util/lru_folder.h"

#include "util/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "util/ends_with.h"

namespace stoker {

namespace {
// This host's temporary whose process is gone, once it is this old: a process in another PID
// namespace (a container sharing the host name) looks gone while it writes.
constexpr int kStaleTempSeconds = 600;
// Another node's temporary (its process cannot be asked) this old belongs to a process that died:
// a day, not minutes, since a part on a slow link may take many minutes and the file system's
// clock (NFS: the server's) may disagree with this host's.
constexpr int kStaleOtherHostTempSeconds = 24 * 3600;
}

LruFolder LruFolder::read(const std::string& dir, std::initializer_list<std::string_view> suffixes) {
  LruFolder folder;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return folder;
  const std::int64_t now = static_cast<std::int64_t>(::time(nullptr));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.find(".stoker-tmp-") != std::string::npos) {
      // A live writer's temporary is never removed (by age alone, a fetch slower than 10 minutes
      // lost its file under it, and the read failed with every byte in hand): this host's when
      // its process is gone and 10 minutes have passed, another host's after a day.
      const std::int64_t age = now - st.st_mtim.tv_sec;
      if ((age > kStaleTempSeconds && isOrphanedTemporary(path)) ||
          (age > kStaleOtherHostTempSeconds && isTemporaryOfAnotherHost(name) && !isTemporaryLocked(path)))
        ::unlink(path.c_str());
      continue;
    }
    if (std::none_of(suffixes.begin(), suffixes.end(), [&](std::string_view s) { return endsWith(name, s); })) continue;
    folder.total += static_cast<std::uint64_t>(st.st_size);
    folder.files.push_back({path, static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  return folder;
}

std::uint64_t LruFolder::trimTo(std::uint64_t target) {
  if (total <= target) return 0;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.usedNs < b.usedNs; });
  std::uint64_t removed = 0;
  for (const File& f : files) {
    if (total <= target) break;
    if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
      total -= f.bytes;
      ++removed;
    }
  }
  return removed;
}

}  // namespace stoker
