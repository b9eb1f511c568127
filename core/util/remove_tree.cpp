#include "util/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace stoker {
namespace {

thread_local int firstError = 0;  // nftw's callback has no user pointer

int removeEntry(const char* path, const struct stat*, int, struct FTW*) {
  if (std::remove(path) != 0 && errno != ENOENT && firstError == 0) firstError = errno;
  return 0;  // go on: remove what can be removed, as remove_all does
}

}  // namespace

void removeTree(const std::string& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec.assign(errno, std::generic_category());
    return;
  }
  firstError = 0;
  // FTW_DEPTH: a directory's entries before the directory; FTW_PHYS: symlinks removed, not followed.
  if (::nftw(path.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0 && firstError == 0) firstError = errno;
  if (firstError != 0) ec.assign(firstError, std::generic_category());
}

}  // namespace stoker
