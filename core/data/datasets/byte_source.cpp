#include "data/datasets/byte_source.h"

#include <cstring>

#include "data/loader_options.h"
#include "net/part_cache.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace stoker {

PartOptions partOptionsOf(const LoaderOptions& options) {
  PartOptions p{options.part_size, options.max_inflight_parts, nullptr};
  if (!options.cache_dir.empty()) p.cache = PartCache::at(options.cache_dir, static_cast<std::uint64_t>(options.cache_limit));
  return p;
}

ByteSource ByteSource::open(const std::string& pathOrUrl, const LoaderOptions& options) {
  ByteSource s;
  s.path_ = pathOrUrl;
  if (isRemotePath(pathOrUrl)) {
    s.parts_ = partOptionsOf(options);
    s.remote_ = RemoteObject::open(pathOrUrl);
    // A file the cache can hold whole is fetched ahead in the background (a token file's random
    // windows need every part anyway); a larger one part by part, as reads ask.
    if (s.parts_.cache && (s.parts_.cache->limit() == 0 || s.remote_->size() <= s.parts_.cache->limit() / 2))
      s.remote_->warmCache(s.parts_);
  } else {
    s.map_ = MappedFile::open(pathOrUrl);
  }
  return s;
}

std::uint64_t ByteSource::size() const { return remote_ ? remote_->size() : map_->size(); }

const std::uint8_t* ByteSource::mapped() const { return map_ ? map_->data() : nullptr; }

void ByteSource::read(std::uint64_t offset, void* dst, std::size_t n) const {
  if (remote_) return remote_->read(offset, dst, n, parts_);
  if (offset > map_->size() || n > map_->size() - offset)
    throwBadInput(path_, "bytes " + std::to_string(offset) + "+" + std::to_string(n) + " lie past its end");
  std::memcpy(dst, map_->data() + offset, n);
}

const std::uint8_t* ByteSource::bytesAt(std::uint64_t offset, std::size_t n, ByteVector& scratch) const {
  if (remote_) return remote_->bytesAt(offset, n, parts_, scratch);
  if (offset > map_->size() || n > map_->size() - offset)
    throwBadInput(path_, "bytes " + std::to_string(offset) + "+" + std::to_string(n) + " lie past its end");
  return map_->data() + offset;
}

std::shared_ptr<const std::vector<std::uint8_t>> ByteSource::readWhole(std::uint64_t maxBytes) const {
  if (size() > maxBytes)
    throwBadInput(path_, std::to_string(size()) + " bytes: more than the " + std::to_string(maxBytes) + " read whole");
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(size()));
  read(0, out->data(), out->size());
  return out;
}

}  // namespace stoker
