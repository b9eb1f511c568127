#include "io/remote_zip_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "io/byte_order.h"
#include "net/remote_object.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

constexpr std::uint64_t kTailBytes = 128 << 10;          // the end record, its comment (<= 64 KiB), a small directory
constexpr std::uint64_t kMaxDirectoryBytes = 256 << 20;  // past this, leave it to minizip's own reads
constexpr std::uint64_t kLocalHeaderBytes = 30;          // what minizip reads of one (name and extra are skipped)
constexpr std::uint64_t kJoinGap = 256 << 10;           // headers closer than this: one request (a round trip costs more)
constexpr std::uint64_t kMaxJoined = 8 << 20;            // joined ranges stay under this

struct Directory {
  std::uint64_t offset = 0, size = 0, entries = 0;
};

// The end of central directory record (and its zip64 form) from the tail; false when there is none.
bool findDirectory(RemoteSpans& spans, std::uint64_t tailAt, std::uint64_t tailBytes, Directory& d) {
  const std::uint8_t* tail = spans.find(tailAt, tailBytes);
  if (!tail || tailBytes < 22) return false;
  for (std::uint64_t i = tailBytes - 22 + 1; i-- > 0;) {
    const std::uint8_t* e = tail + i;
    if (loadLittleEndian<std::uint32_t>(e) != 0x06054b50) continue;
    d.entries = loadLittleEndian<std::uint16_t>(e + 10);
    d.size = loadLittleEndian<std::uint32_t>(e + 12);
    d.offset = loadLittleEndian<std::uint32_t>(e + 16);
    if (d.entries != 0xffff && d.size != 0xffffffff && d.offset != 0xffffffff) return true;
    // Zip64 (torch.save writes it for large files): the locator just before points at the record.
    if (i < 20) return false;
    const std::uint8_t* loc = e - 20;
    if (loadLittleEndian<std::uint32_t>(loc) != 0x07064b50) return false;
    const std::uint64_t recordAt = loadLittleEndian<std::uint64_t>(loc + 8);
    spans.fetch({{recordAt, 56}}, 0);
    const std::uint8_t* r = spans.find(recordAt, 56);
    if (!r || loadLittleEndian<std::uint32_t>(r) != 0x06064b50) return false;
    d.entries = loadLittleEndian<std::uint64_t>(r + 32);
    d.size = loadLittleEndian<std::uint64_t>(r + 40);
    d.offset = loadLittleEndian<std::uint64_t>(r + 48);
    return true;
  }
  return false;
}

// Every local header's offset, from the central directory's entries.
std::vector<std::uint64_t> localHeaders(const std::uint8_t* dir, const Directory& d) {
  std::vector<std::uint64_t> out;
  std::uint64_t at = 0;
  for (std::uint64_t k = 0; k < d.entries && at + 46 <= d.size; ++k) {
    const std::uint8_t* e = dir + at;
    if (loadLittleEndian<std::uint32_t>(e) != 0x02014b50) break;
    const std::uint32_t compressed = loadLittleEndian<std::uint32_t>(e + 20), plain = loadLittleEndian<std::uint32_t>(e + 24);
    const std::uint16_t nameLen = loadLittleEndian<std::uint16_t>(e + 28), extraLen = loadLittleEndian<std::uint16_t>(e + 30),
                        commentLen = loadLittleEndian<std::uint16_t>(e + 32);
    std::uint64_t local = loadLittleEndian<std::uint32_t>(e + 42);
    if (at + 46 + nameLen + extraLen > d.size) break;
    if (local == 0xffffffff) {  // in the zip64 extra field, after the sizes that overflowed
      const std::uint8_t* x = e + 46 + nameLen;
      for (std::uint32_t j = 0; j + 4 <= extraLen;) {
        const std::uint16_t id = loadLittleEndian<std::uint16_t>(x + j), len = loadLittleEndian<std::uint16_t>(x + j + 2);
        if (id == 0x0001) {
          std::uint32_t skip = (plain == 0xffffffff ? 8 : 0) + (compressed == 0xffffffff ? 8 : 0);
          if (skip + 8 <= len && j + 4 + skip + 8 <= extraLen) local = loadLittleEndian<std::uint64_t>(x + j + 4 + skip);
          break;
        }
        j += 4 + len;
      }
    }
    if (local != 0xffffffff) out.push_back(local);
    at += 46ull + nameLen + extraLen + commentLen;
  }
  return out;
}

}  // namespace

RemoteSpans::RemoteSpans(std::shared_ptr<const RemoteObject> object) : object_(std::move(object)) {}

const std::uint8_t* RemoteSpans::find(std::uint64_t at, std::uint64_t n) const {
  auto it = spans_.upper_bound(at);
  if (it == spans_.begin()) return nullptr;
  --it;
  if (at + n > it->first + it->second.size()) return nullptr;
  return it->second.data() + (at - it->first);
}

void RemoteSpans::add(std::uint64_t at, ByteVector bytes) {
  // Kept disjoint: bytes that overlap a span held already are cut to what is new.
  auto next = spans_.lower_bound(at);
  if (next != spans_.begin()) {
    const auto prev = std::prev(next);
    const std::uint64_t prevEnd = prev->first + prev->second.size();
    if (prevEnd > at) {
      const std::uint64_t cut = std::min<std::uint64_t>(prevEnd - at, bytes.size());
      bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
      at += cut;
    }
  }
  next = spans_.lower_bound(at);
  if (next != spans_.end() && next->first < at + bytes.size()) bytes.resize(static_cast<std::size_t>(next->first - at));
  if (!bytes.empty()) spans_.emplace(at, std::move(bytes));
}

void RemoteSpans::fetch(std::vector<std::pair<std::uint64_t, std::uint64_t>> wanted, std::uint64_t joinGap, int threads) {
  const std::uint64_t size = object_->size();
  std::sort(wanted.begin(), wanted.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // (at, bytes)
  for (auto [at, n] : wanted) {
    if (at >= size) continue;
    const std::uint64_t end = std::min(at + n, size);
    if (end == at || find(at, end - at)) continue;
    if (!ranges.empty() && at <= ranges.back().first + ranges.back().second + joinGap &&
        end - ranges.back().first <= kMaxJoined)
      ranges.back().second = std::max(ranges.back().second, end - ranges.back().first);
    else
      ranges.emplace_back(at, end - at);
  }
  std::vector<ByteVector> fetched(ranges.size());
  forEachInParallel(static_cast<std::int64_t>(ranges.size()), threads, [&](std::int64_t i) {
    const auto [at, n] = ranges[static_cast<std::size_t>(i)];
    ByteVector& bytes = fetched[static_cast<std::size_t>(i)];
    bytes.resize(static_cast<std::size_t>(n));
    object_->read(at, bytes.data(), bytes.size());
  });
  for (std::size_t i = 0; i < ranges.size(); ++i) add(ranges[i].first, std::move(fetched[i]));
}

std::uint64_t RemoteSpans::read(void* dst, std::uint64_t n, std::uint64_t at) const {
  const std::uint64_t size = object_->size();
  if (at >= size) return 0;
  n = std::min(n, size - at);
  const auto next = spans_.upper_bound(at);
  if (next != spans_.begin()) {
    const auto prev = std::prev(next);
    const std::uint64_t end = prev->first + prev->second.size();
    if (at < end) {
      const std::uint64_t k = std::min(n, end - at);
      std::memcpy(dst, prev->second.data() + (at - prev->first), static_cast<std::size_t>(k));
      return k;
    }
  }
  if (next != spans_.end()) n = std::min(n, next->first - at);
  object_->read(at, dst, static_cast<std::size_t>(n));
  return n;
}

ZipReadAt RemoteSpans::reader() const {
  auto self = shared_from_this();
  return [self](void* dst, std::uint64_t n, std::uint64_t at) { return self->read(dst, n, at); };
}

ZipReadAt remoteZipReader(std::shared_ptr<const RemoteObject> object) {
  auto spans = std::make_shared<RemoteSpans>(std::move(object));
  const RemoteObject& o = *spans->object();
  // What open() brought (the start of the file: often data.pkl), then the tail.
  if (!o.head().empty()) spans->add(0, ByteVector(o.head().begin(), o.head().end()));
  const std::uint64_t tailBytes = std::min(o.size(), kTailBytes);
  const std::uint64_t tailAt = o.size() - tailBytes;
  spans->fetch({{tailAt, tailBytes}}, 0);
  Directory d;
  if (findDirectory(*spans, tailAt, tailBytes, d) && d.size <= kMaxDirectoryBytes && d.offset + d.size <= o.size()) {
    spans->fetch({{d.offset, d.size}}, 0);
    if (const std::uint8_t* dir = spans->find(d.offset, d.size)) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> headers;
      for (std::uint64_t at : localHeaders(dir, d)) headers.emplace_back(at, kLocalHeaderBytes);
      spans->fetch(std::move(headers), kJoinGap);
    }
  }
  return spans->reader();
}

}  // namespace stoker
