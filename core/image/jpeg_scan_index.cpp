#include "image/jpeg_scan_index.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "util/error.h"

namespace stoker {

JpegIndexCache::JpegIndexCache(std::int64_t samples, std::size_t budgetBytes)
    : slots_(static_cast<std::size_t>(samples > 0 ? samples : 0)),
      refused_(std::make_unique<std::atomic<bool>[]>(slots_.size())),
      budget_(budgetBytes),
      spacing_(budgetBytes / std::max<std::size_t>(slots_.size(), 1) >= (std::size_t{16} << 10) ? 32 : 64) {}

bool JpegIndexCache::mayIndex(std::int64_t sample) const {
  return budget_ > 0 && sample >= 0 && static_cast<std::size_t>(sample) < slots_.size() &&
         !refused_[static_cast<std::size_t>(sample)].load(std::memory_order_relaxed);
}

std::shared_ptr<const JpegScanIndex> JpegIndexCache::get(std::int64_t sample) const {
  if (budget_ == 0 || sample < 0 || static_cast<std::size_t>(sample) >= slots_.size()) return nullptr;
  return std::atomic_load(&slots_[static_cast<std::size_t>(sample)]);
}

void JpegIndexCache::put(std::int64_t sample, std::shared_ptr<const JpegScanIndex> index) {
  if (!index || sample < 0 || static_cast<std::size_t>(sample) >= slots_.size()) return;
  const std::size_t add = index->bytes();
  // Reserve the new index's bytes first, so that threads racing for the last of the budget cannot
  // all pass it; the old index's bytes are given back once it is replaced.
  std::size_t now = bytes_.load(std::memory_order_relaxed);
  do {
    if (now + add > budget_) {
      refused_[static_cast<std::size_t>(sample)].store(true, std::memory_order_relaxed);
      return;
    }
  } while (!bytes_.compare_exchange_weak(now, now + add, std::memory_order_relaxed));
  std::shared_ptr<const JpegScanIndex> old = std::atomic_exchange(&slots_[static_cast<std::size_t>(sample)], std::move(index));
  if (old) bytes_.fetch_sub(old->bytes(), std::memory_order_relaxed);
}

std::size_t JpegIndexCache::defaultBudget() {
  const char* v = std::getenv("STOKER_JPEG_SCAN_INDEX_MB");
  if (!v || !*v) return std::size_t{1024} << 20;
  // Digits only (strtoull would take "-1" as a huge budget and "12x" as 12), at most 1 TiB.
  const std::string text(v);
  constexpr std::uint64_t kMostMiB = 1u << 20;
  std::uint64_t mb = 0;
  for (const char c : text) {
    if (c < '0' || c > '9' || mb > kMostMiB) {
      mb = kMostMiB + 1;
      break;
    }
    mb = mb * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (mb > kMostMiB)
    throwBadInput("STOKER_JPEG_SCAN_INDEX_MB", "must be a whole number of MiB from 0 (no index) to " +
                                                   std::to_string(kMostMiB) + " (got '" + text + "')");
  return static_cast<std::size_t>(mb) << 20;
}

}  // namespace stoker
