#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace stoker {

bool hugePagesWanted() {
  const char* v = std::getenv("STOKER_HUGE_PAGES");
  if (!v || !*v) return true;
  const std::string s = v;
  if (s == "1") return true;
  if (s == "0") return false;
  throwBadInput("STOKER_HUGE_PAGES", "must be 0 or 1 (got \"" + s + "\")");
}

bool adviseHugePages(void* p, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  return bytes > 0 && ::madvise(p, bytes, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

}  // namespace stoker
