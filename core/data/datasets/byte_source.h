// data/datasets/byte_source: a dataset's file, local or remote. A local path is mapped (reads
// are views, no copy); an s3:// or http(s):// URL is a RemoteObject read by byte ranges, in
// parts of the loader's part_size with at most max_inflight_parts in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/remote_object.h"

namespace stoker {

class MappedFile;
struct LoaderOptions;

// How the loader's options read remote objects: part_size, max_inflight_parts and, with cache_dir,
// the node's part cache.
PartOptions partOptionsOf(const LoaderOptions& options);

class ByteSource {
 public:
  static ByteSource open(const std::string& pathOrUrl, const LoaderOptions& options);
  const std::string& path() const { return path_; }
  std::uint64_t size() const;
  bool remote() const { return remote_ != nullptr; }
  bool cached() const { return parts_.cache != nullptr; }  // remote, read through cache_dir
  const PartOptions& parts() const { return parts_; }  // how a remote file is read (defaults when local)
  // The bytes themselves when mapped; null when remote.
  const std::uint8_t* mapped() const;
  // Exactly n bytes at offset (Error(BadInput) past the end).
  void read(std::uint64_t offset, void* dst, std::size_t n) const;
  // The n bytes at offset without a copy where they are mapped (a local file, a part in cache_dir),
  // else read into `scratch`.
  const std::uint8_t* bytesAt(std::uint64_t offset, std::size_t n, ByteVector& scratch) const;
  // Remote, uncached, over HTTP(S) whose server has not declined it: several ranges go in one
  // request (RemoteObject::readRanges).
  bool servesRanges() const { return remote_ && !parts_.cache && remote_->servesRanges(); }
  // False when the server declined (read them one each).
  bool readRanges(std::vector<ByteRange>& ranges) const { return remote_ && remote_->readRanges(ranges); }
  int rangesPerRequest() const { return remote_ ? remote_->rangesPerRequest() : 1; }
  // The whole file in memory: a view of the mapping, or the remote object fetched in parts
  // (`maxBytes`: refuse larger ones, they are not meant to be read whole).
  std::shared_ptr<const std::vector<std::uint8_t>> readWhole(std::uint64_t maxBytes) const;

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> map_;
  std::shared_ptr<const RemoteObject> remote_;
  PartOptions parts_;
};

}  // namespace stoker
