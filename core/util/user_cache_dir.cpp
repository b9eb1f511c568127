#include "util/user_cache_dir.h"

#include <cstdlib>

namespace stoker {

std::string userCacheDir() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  if (std::string dir = env("STOKER_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/stoker";
  if (std::string home = env("HOME"); !home.empty()) return home + "/.cache/stoker";
  return {};
}

}  // namespace stoker
