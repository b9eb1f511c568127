#include "data/datasets/wds_kept_scans.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include <xxhash.h>

#include "data/datasets/dataset_spec.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/lru_folder.h"
#include "util/read_file.h"
#include "util/user_cache_dir.h"

namespace stoker {

namespace {
constexpr const char* kSuffix = ".wds.idx";
constexpr const char* kLastSuffix = ".wds.last";
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
  LruFolder scans = LruFolder::read(dir_, {kSuffix, kLastSuffix});
  if (scans.total > limit_) scans.trimTo(limit_ / 10 * 9);
}

}  // namespace stoker
