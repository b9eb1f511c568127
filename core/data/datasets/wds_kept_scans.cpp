#include "data/datasets/wds_kept_scans.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <xxhash.h>

#include "data/datasets/dataset_spec.h"
#include "util/atomic_file.h"
#include "util/ends_with.h"
#include "util/error.h"
#include "util/read_file.h"
#include "util/user_cache_dir.h"

namespace stoker {

namespace {
constexpr const char* kSuffix = ".wds.idx";
constexpr const char* kLastSuffix = ".wds.last";
constexpr int kStaleTempSeconds = 600;  // a temporary file this old belongs to a process that died
}  // namespace

std::shared_ptr<WdsKeptScans> WdsKeptScans::of(const DatasetSpec& spec, const std::string& cacheDir) {
  if (const auto it = spec.options.find("scan_cache"); it != spec.options.end()) {
    if (it->second == "off") return nullptr;
    if (it->second.empty() || it->second == "on")
      throwBadInput(spec.text, "scan_cache=" + it->second + ": name a folder (scan_cache=DIR), or scan_cache=off to keep no scans");
    return std::make_shared<WdsKeptScans>(it->second, 0);
  }
  if (!cacheDir.empty()) return std::make_shared<WdsKeptScans>(cacheDir, 0);
  const std::string user = userCacheDir();
  if (user.empty()) return nullptr;
  return std::make_shared<WdsKeptScans>(user + "/wds-scans", kUserCacheLimit);
}

std::string WdsKeptScans::lastPathOf(const std::string& url) const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(url.data(), url.size())));
  return dir_ + "/" + hex + kLastSuffix;
}

std::string WdsKeptScans::lastScanOf(const std::string& url) const {
  const std::string path = lastPathOf(url);
  std::vector<std::uint8_t> bytes;
  try {
    readWholeFile(path, 64, bytes);
  } catch (const Error&) {
    return {};  // none, or unreadable: the shard is scanned (and noted again)
  }
  std::string id(bytes.begin(), bytes.end());
  if (id.size() != 16 || id.find_first_not_of("0123456789abcdef") != std::string::npos) return {};
  touch(path);
  return id;
}

void WdsKeptScans::noteLast(const std::string& url, const std::string& cacheId) { keep(lastPathOf(url), cacheId); }

void WdsKeptScans::touch(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // a read-only folder: it just keeps its age
}

bool WdsKeptScans::makeFolder() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!tried_) {
    tried_ = true;
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    made_ = !ec;
    if (ec && problem_.empty()) problem_ = dir_ + ": " + ec.message();
  }
  return made_;
}

void WdsKeptScans::keep(const std::string& path, const std::string& text) {
  if (!makeFolder()) return;
  try {
    AtomicFile file(path);
    file.write(text.data(), text.size());
    file.commit(false);  // like a cached part: a copy that can be made again
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (problem_.empty()) problem_ = e.what();
  }
}

std::string WdsKeptScans::problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problem_;
}

void WdsKeptScans::trim() const {
  if (limit_ == 0) return;
  struct Entry {
    std::string path;
    std::uint64_t bytes;
    std::int64_t usedNs;
  };
  std::vector<Entry> scans;
  std::uint64_t total = 0;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  const std::int64_t now = static_cast<std::int64_t>(::time(nullptr));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir_ + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.find(".stoker-tmp-") != std::string::npos) {
      if (now - st.st_mtim.tv_sec > kStaleTempSeconds) ::unlink(path.c_str());
      continue;
    }
    if (!endsWith(name, kSuffix) && !endsWith(name, kLastSuffix)) continue;
    total += static_cast<std::uint64_t>(st.st_size);
    scans.push_back({path, static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  if (total <= limit_) return;
  std::sort(scans.begin(), scans.end(), [](const Entry& a, const Entry& b) { return a.usedNs < b.usedNs; });
  for (const Entry& s : scans) {
    if (total <= limit_ / 10 * 9) break;
    if (::unlink(s.path.c_str()) == 0 || errno == ENOENT) total -= s.bytes;
  }
}

}  // namespace stoker
