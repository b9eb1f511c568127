#include "net/remote_object.h"

#include <pugixml.hpp>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "net/part_cache.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/open_progress.h"
#include "util/run_jobs.h"

namespace stoker {

HttpTarget targetOf(const std::string& url, const S3Config* s3) {
  const RemoteUrl u = RemoteUrl::parse(url);
  HttpTarget t;
  t.display = redactedUrl(url);
  if (!u.isS3()) {
    t.url = url;
    return t;
  }
  t.s3 = s3 ? *s3 : loadS3Config();
  t.url = t.s3->objectUrl(u.bucket, u.key);
  return t;
}

int readsInFlight(const PartOptions& parts, std::uint64_t bytesEach) {
  const int least = std::max(parts.maxInflight, 1);
  if (parts.cache || bytesEach == 0) return least;
  const std::uint64_t budget = static_cast<std::uint64_t>(std::max<std::int64_t>(parts.partSize, 1)) * static_cast<std::uint64_t>(least);
  return static_cast<int>(std::clamp<std::uint64_t>(budget / bytesEach, static_cast<std::uint64_t>(least),
                                                    static_cast<std::uint64_t>(std::max(least, kMaxReadsInFlight))));
}

int rangesPerRequest() {
  const char* v = std::getenv("STOKER_HTTP_RANGES_PER_REQUEST");  // read each time: a test or a benchmark sets it
  if (!v || !*v) return 64;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < 1 || x > 256) throwBadInput(std::string("STOKER_HTTP_RANGES_PER_REQUEST=") + v, "must be 1-256");
  return static_cast<int>(x);
}

std::string cacheIdOf(const HttpTarget& target, const std::string& etag, std::uint64_t size) {
  // Where the object is without credentials: an S3 request URL carries none (the signature is a
  // header), an HTTP one may (user:password@, a presigned query), so its redacted form.
  return objectIdOf(target.s3 ? target.url : target.display, etag, size);
}

std::shared_ptr<const RemoteObject> RemoteObject::open(const std::string& url, std::size_t headBytes, const S3Config* s3,
                                                      ByteVector* takeHead) {
  auto o = std::make_shared<RemoteObject>();
  o->target_ = targetOf(url, s3);
  if (o->target_.s3 && RemoteUrl::parse(url).key.empty()) throwBadInput(o->target_.display, "names a bucket, not an object");
  headBytes = std::max<std::size_t>(headBytes, 1);
  // Received in place into bytes left uninitialised (util/byte_vector), then cut to what came:
  // zeroing a head sized to a part (8 MiB by default, for shards of 2 MB) cost 85 ms of a
  // 100-shard open, and a buffer copied into the head faulted every page twice.
  o->head_.resize(headBytes);
  const RangeReply r = httpGetRange(o->target_, 0, headBytes, o->head_.data(), {}, true);
  o->head_.resize(std::min<std::size_t>(r.got, headBytes));
  o->size_ = r.objectSize;
  o->etag_ = r.etag;
  o->cacheId_ = cacheIdOf(o->target_, r.etag, r.objectSize);
  if (r.got < headBytes && r.got < o->size_)
    throwBadInput(o->target_.display, "the server sent " + std::to_string(r.got) + " of the first " + std::to_string(headBytes) + " bytes");
  if (takeHead) *takeHead = std::exchange(o->head_, {});
  return o;
}

std::string RemoteObject::whole(std::uint64_t maxBytes, const std::string& what) const {
  if (size_ > maxBytes) throwBadInput(url(), "is larger than " + std::to_string(maxBytes >> 20) + " MiB; not " + what);
  std::string bytes(static_cast<std::size_t>(size_), '\0');
  if (bytes.size() <= head_.size())
    std::copy(head_.begin(), head_.begin() + static_cast<std::ptrdiff_t>(bytes.size()), bytes.begin());
  else
    read(0, bytes.data(), bytes.size());
  return bytes;
}

void RemoteObject::requireRange(std::uint64_t offset, std::uint64_t n) const {
  if (offset > size_ || n > size_ - offset)
    throwBadInput(target_.display, "bytes " + std::to_string(offset) + "+" + std::to_string(n) + " lie past its end (" +
                                       std::to_string(size_) + " bytes)");
}

void RemoteObject::read(std::uint64_t offset, void* dst, std::size_t n, const PartOptions& parts, const PartDone& partDone) const {
  requireRange(offset, n);
  if (n == 0) return;  // an empty object's bytes (readCached's last part would wrap below its first)
  auto* out = static_cast<std::uint8_t*>(dst);
  if (parts.cache && !cacheId_.empty()) return readCached(offset, out, n, parts, partDone);
  // What open() already holds costs no request.
  if (offset < head_.size()) {
    const std::size_t have = std::min<std::size_t>(n, head_.size() - offset);
    std::copy_n(head_.data() + offset, have, out);
    out += have;
    offset += have;
    n -= have;
    if (partDone && have > 0) partDone(have);
  }
  if (n == 0) return;
  const std::uint64_t partSize = static_cast<std::uint64_t>(std::max<std::int64_t>(parts.partSize, 4096));
  const std::uint64_t count = (n + partSize - 1) / partSize;
  if (count == 1) {
    httpGetRange(target_, offset, n, out, etag_);
    if (partDone) partDone(n);
    return;
  }
  forEachInParallel(static_cast<std::int64_t>(count), parts.maxInflight, [&](std::int64_t p) {
    const std::uint64_t at = static_cast<std::uint64_t>(p) * partSize;
    const auto bytes = static_cast<std::size_t>(std::min<std::uint64_t>(partSize, n - at));
    httpGetRange(target_, offset + at, bytes, out + at, etag_);
    if (partDone) partDone(bytes);
  });
}

bool RemoteObject::servesRanges() const { return !target_.s3 && !rangesDeclined_.load(std::memory_order_relaxed) && rangesPerRequest() > 1; }

bool RemoteObject::readRanges(std::vector<ByteRange>& ranges) const {
  if (ranges.empty()) return true;
  for (const ByteRange& r : ranges) requireRange(r.offset, r.n);
  if (!servesRanges()) return false;
  int served = 0;
  if (httpGetRanges(target_, ranges, etag_, &served)) {
    // Keep the fewest any reply served: requests from now on ask for no more than that.
    int was = rangesServed_.load();
    while (served > 0 && (was == 0 || served < was) && !rangesServed_.compare_exchange_weak(was, served)) {
    }
    return true;
  }
  rangesDeclined_.store(true, std::memory_order_relaxed);
  return false;
}

int RemoteObject::rangesPerRequest() const {
  const int served = rangesServed_.load(std::memory_order_relaxed);
  return served > 0 ? std::min(served, stoker::rangesPerRequest()) : stoker::rangesPerRequest();
}

RemoteObject::PartView RemoteObject::cachedPart(std::uint64_t index, std::uint64_t partSize, const PartOptions& parts) const {
  const bool tabled = partSize == tablePartSize_;
  if (tabled)
    if (const MappedFile* hit = table_[index].load(std::memory_order_acquire)) return {hit, nullptr};
  const std::uint64_t at = index * partSize;
  const auto bytes = static_cast<std::size_t>(std::min<std::uint64_t>(partSize, size_ - at));
  PartCache::Part p = parts.cache->streamedPart(cacheId_, partSize, index, bytes,
                                                [&](const ByteSink& sink) { httpGetRange(target_, at, bytes, sink, etag_); });
  // A part held in memory (the disk was full) serves this read only: memory stays bounded by the
  // parts in use. One on disk is kept for the object's life (a mapping costs pages only when read),
  // within cache_limit: past it, it serves this read only too (a kept mapping holds the disk blocks
  // of a part the limit's eviction removed).
  if (!p.onDisk) return {p.bytes.get(), p.bytes};
  std::lock_guard<std::mutex> lock(partsMutex_);
  if (!parts.cache->holdMapping(p.bytes->size())) return {p.bytes.get(), p.bytes};
  if (heldIn_ && heldIn_ != parts.cache) {  // one cache per object in practice; else counted where it was held
    parts.cache->releaseMapping(p.bytes->size());
    return {p.bytes.get(), p.bytes};
  }
  heldIn_ = parts.cache;
  heldBytes_ += p.bytes->size();
  tableOwned_.push_back(p.bytes);
  if (tabled) table_[index].store(p.bytes.get(), std::memory_order_release);
  return {p.bytes.get(), nullptr};
}

RemoteObject::~RemoteObject() {
  stopWarming_ = true;
  for (auto& t : warmers_) t.join();  // each finishes the part it is fetching
  if (heldIn_) heldIn_->releaseMapping(heldBytes_);
}

void RemoteObject::warmCache(const PartOptions& parts) const {
  if (!parts.cache || cacheId_.empty() || size_ == 0) return;
  const std::uint64_t partSize = tableFor(parts);
  const std::uint64_t count = (size_ + partSize - 1) / partSize;
  std::lock_guard<std::mutex> lock(partsMutex_);
  if (!warmers_.empty()) return;
  const int threads = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(parts.maxInflight, 1)), count));
  for (int t = 0; t < threads; ++t)
    warmers_.emplace_back([this, parts, partSize, count] {
      try {
        for (std::uint64_t k; !stopWarming_ && (k = nextWarm_++) < count;)
          if (cachedPart(k, partSize, parts).hold) break;  // the folder or cache_limit takes no more: warming would only download
      } catch (...) {
        stopWarming_ = true;  // the server failed: the reads that need these parts will say how
      }
    });
}

std::uint64_t RemoteObject::tableFor(const PartOptions& parts) const {
  const std::uint64_t partSize = static_cast<std::uint64_t>(std::max<std::int64_t>(parts.partSize, 4096));
  std::call_once(tableOnce_, [&] {  // the first part size read with is the one tabled
    const std::uint64_t count = (size_ + partSize - 1) / partSize;
    table_.reset(new std::atomic<const MappedFile*>[count]());
    tablePartSize_ = partSize;
  });
  return partSize;
}

const std::uint8_t* RemoteObject::bytesAt(std::uint64_t offset, std::size_t n, const PartOptions& parts,
                                          ByteVector& scratch) const {
  if (parts.cache && !cacheId_.empty() && n > 0 && offset < size_ && n <= size_ - offset) {
    const std::uint64_t partSize = tableFor(parts);
    const std::uint64_t index = offset / partSize;
    if (index == (offset + n - 1) / partSize) {
      const PartView part = cachedPart(index, partSize, parts);
      const std::uint8_t* at = part.bytes->data() + (offset - index * partSize);
      if (!part.hold) return at;  // kept on disk: mapped for this object's life
      scratch.assign(at, at + n);
      return scratch.data();
    }
  }
  scratch.resize(n);
  read(offset, scratch.data(), n, parts);
  return scratch.data();
}

void RemoteObject::cacheParts(std::uint64_t offset, std::uint64_t n, const PartOptions& parts) const {
  requireRange(offset, n);
  if (!parts.cache || cacheId_.empty() || n == 0) return;
  const std::uint64_t partSize = tableFor(parts);
  const std::uint64_t first = offset / partSize, last = (offset + n - 1) / partSize;
  // A part the folder could not take (disk full) is dropped here and fetched again when read.
  forEachInParallel(static_cast<std::int64_t>(last - first + 1), parts.maxInflight,
                    [&](std::int64_t k) { cachedPart(first + static_cast<std::uint64_t>(k), partSize, parts); });
}

void RemoteObject::readCached(std::uint64_t offset, std::uint8_t* out, std::size_t n, const PartOptions& parts,
                              const PartDone& partDone) const {
  const std::uint64_t partSize = tableFor(parts);
  const std::uint64_t first = offset / partSize, last = (offset + n - 1) / partSize;
  const auto copyPart = [&](std::uint64_t index) {
    const std::uint64_t from = std::max(offset, index * partSize);
    const std::uint64_t to = std::min<std::uint64_t>(offset + n, (index + 1) * partSize);
    const PartView part = cachedPart(index, partSize, parts);
    std::copy_n(part.bytes->data() + (from - index * partSize), to - from, out + (from - offset));
    if (partDone) partDone(static_cast<std::size_t>(to - from));
  };
  if (first == last) return copyPart(first);
  forEachInParallel(static_cast<std::int64_t>(last - first + 1), parts.maxInflight,
                    [&](std::int64_t k) { copyPart(first + static_cast<std::uint64_t>(k)); });
}

std::shared_ptr<const MappedFile> mapOrFetch(const std::string& pathOrUrl, const PartOptions& parts) {
  if (!isRemotePath(pathOrUrl)) return MappedFile::open(pathOrUrl);
  OpenProgressMeter meter(currentOpenProgress(), 1, "files fetched");
  meter.checkCancelled(pathOrUrl);
  const auto object = RemoteObject::open(pathOrUrl);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(object->size()));
  OpenProgressMeter::Piece piece(meter, pathOrUrl);
  piece.sized(object->size());
  std::mutex reachedMutex;  // a Piece is told by one thread at a time; parts finish on several
  std::uint64_t reached = 0;
  object->read(0, bytes.data(), bytes.size(), parts, [&](std::size_t got) {
    {
      std::lock_guard<std::mutex> lock(reachedMutex);
      piece.reached(reached += got);
    }
    meter.checkCancelled(pathOrUrl);
  });
  piece.done(object->size());
  meter.finish();
  return MappedFile::fromBytes(pathOrUrl, std::move(bytes));
}

std::vector<ListedObject> listS3(const std::string& prefixUrl, bool byFolder, std::vector<std::string>* prefixes,
                                 const std::function<void(std::size_t listed)>& pageDone) {
  const RemoteUrl u = RemoteUrl::parse(prefixUrl);
  if (!u.isS3()) throwBadInput(prefixUrl, "only s3:// URLs can be listed (an HTTP server has no standard listing)");
  HttpTarget t;
  t.s3 = loadS3Config();
  std::vector<ListedObject> out;
  std::string token;
  // A listing of a million objects is a thousand requests, one after the other: an open that the
  // user stops (util/open_progress) stops between them.
  const CancelToken* cancel = currentOpenProgress().cancel;
  for (int page = 0;; ++page) {
    if (cancel) cancel->throwIfCancelled(prefixUrl + " (listing)");
    // Query parameters in the order SigV4's canonical request sorts them (curl signs the URL as given).
    std::string query;
    if (!token.empty()) query += "continuation-token=" + percentEncode(token, false) + "&";
    if (byFolder) query += "delimiter=%2F&";
    query += "list-type=2&";
    if (const char* keys = std::getenv("STOKER_S3_LIST_MAX_KEYS"); keys && *keys) query += "max-keys=" + std::to_string(std::atoi(keys)) + "&";
    query += "prefix=" + percentEncode(u.key, false);
    t.url = t.s3->objectUrl(u.bucket, "") + "?" + query;
    t.display = prefixUrl + " (listing, page " + std::to_string(page + 1) + ")";
    const std::string xml = httpGetText(t, std::size_t(64) << 20);
    pugi::xml_document doc;
    if (!doc.load_string(xml.c_str())) throwBadInput(t.display, "the listing is not XML");
    const pugi::xml_node root = doc.child("ListBucketResult");
    if (!root) throwBadInput(t.display, "the reply is not a ListBucketResult");
    for (pugi::xml_node c : root.children("Contents")) {
      const std::string key = c.child_value("Key");
      if (!key.empty() && key.back() == '/') continue;  // a folder marker, not an object
      out.push_back({"s3://" + u.bucket + "/" + key, std::stoull(std::string("0") + c.child_value("Size")), c.child_value("ETag")});
    }
    if (prefixes)
      for (pugi::xml_node p : root.children("CommonPrefixes")) prefixes->push_back("s3://" + u.bucket + "/" + p.child_value("Prefix"));
    if (pageDone) pageDone(out.size());
    if (std::string(root.child_value("IsTruncated")) != "true") break;
    token = root.child_value("NextContinuationToken");
    if (token.empty()) throwBadInput(t.display, "a truncated listing without a NextContinuationToken");
  }
  return out;
}

}  // namespace stoker
