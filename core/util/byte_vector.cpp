#include "util/byte_vector.h"

#include <sys/mman.h>

#include "util/huge_pages.h"

namespace stoker {

namespace {

// Decided once: a buffer must be freed the way it was allocated.
bool buffersOnHugePages() {
  static const bool wanted = [] {
    try {
      return hugePagesWanted();
    } catch (...) {  // a bad STOKER_HUGE_PAGES: the loader's open refuses it, an allocation does not
      return false;
    }
  }();
  return wanted;
}

// Under AddressSanitizer every buffer comes from operator new, whose redzones catch an overrun that
// a mapping of whole pages would hide.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

bool mappedOnItsOwn(std::size_t bytes) { return bytes >= kHugePageBytes && largeBuffersOnHugePages(); }

std::size_t wholeHugePages(std::size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

}  // namespace

bool largeBuffersOnHugePages() { return !kSanitized && buffersOnHugePages(); }

void* allocateBytes(std::size_t bytes) {
  if (!mappedOnItsOwn(bytes)) return ::operator new(bytes);
  // A huge page more than needed, then the slack before the first boundary and after the last page
  // given back: [p, p + length) is exactly what freeBytes unmaps.
  const std::size_t length = wholeHugePages(bytes);
  void* raw = ::mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t p = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (p > start) ::munmap(raw, p - start);
  if (const std::size_t after = start + length + kHugePageBytes - (p + length); after > 0)
    ::munmap(reinterpret_cast<void*>(p + length), after);
  return reinterpret_cast<void*>(p);  // on 4 KiB pages until adviseFilledHugePages
}

void adviseFilledHugePages(void* p, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (at % kHugePageBytes != 0 || !mappedOnItsOwn(bytes)) return;
  adviseHugePages(p, bytes / kHugePageBytes * kHugePageBytes);
}

void freeBytes(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  if (!mappedOnItsOwn(bytes)) {
    ::operator delete(p);
    return;
  }
  ::munmap(p, wholeHugePages(bytes));
}

}  // namespace stoker
