// util/lru_folder: a cache folder's files, least recently used first out. Shared by the part
// cache (net/part_cache) and the kept scans of remote shards (data/datasets/wds_kept_scans): a
// file's modification time is when it was last used (its user touches it), and the temporary
// files of writers that died long ago (util/atomic_file's `.stoker-tmp-`) go as the folder is read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace stoker {

struct LruFolder {
  struct File {
    std::string path;
    std::uint64_t bytes = 0;
    std::int64_t usedNs = 0;  // modification time
  };
  std::vector<File> files;
  std::uint64_t total = 0;  // their bytes

  // The regular files of `dir` whose names end in one of `suffixes` (none when it cannot be read).
  static LruFolder read(const std::string& dir, std::initializer_list<std::string_view> suffixes);
  // Removes the least recently used files until `total` is at most `target`; returns how many went.
  std::uint64_t trimTo(std::uint64_t target);
};

}  // namespace stoker
