// io/remote_zip_reader: what ZipArchive reads of a zip in S3 or behind HTTP(S) -- a remote .pt
// (torch.save's zip: `model.pt`, HF's `pytorch_model.bin`), or the torch.save zips that a remote
// DCP `.distcp` file holds back to back.
//
// minizip walks a zip a few bytes at a time: the end record, the central directory, then each
// record's local header, which lies just before the record's data, all over the file. Read on
// demand that is a round trip per record, one after another (a 300-tensor state dict at 50 ms:
// 15 s to list it). So the bytes minizip will want are fetched ahead (16 requests at a time,
// ranges less than `joinGap` apart in one), and minizip walks memory; what else it reads
// (a large data.pkl, a record's bytes) is a range read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "io/zip_archive.h"
#include "util/byte_vector.h"

namespace stoker {

class RemoteObject;

// Byte ranges of a remote object fetched ahead, and a reader that serves reads from them.
class RemoteSpans : public std::enable_shared_from_this<RemoteSpans> {
 public:
  explicit RemoteSpans(std::shared_ptr<const RemoteObject> object);
  const std::shared_ptr<const RemoteObject>& object() const { return object_; }

  // Fetches what of these (offset, bytes) ranges is not held yet, ranges less than `joinGap`
  // apart (and at most 8 MiB together) in one request, `threads` requests at a time. Not
  // thread-safe against reads: fetch first, then read.
  void fetch(std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges, std::uint64_t joinGap, int threads = 16);
  void add(std::uint64_t at, ByteVector bytes);  // bytes the caller has already (an open's head)
  // [at, at + n) if one span holds it all, else null.
  const std::uint8_t* find(std::uint64_t at, std::uint64_t n) const;
  // A ZipReadAt: the bytes a span holds from `at`, else one range read up to the next span.
  // Keeps these spans alive.
  ZipReadAt reader() const;

 private:
  std::uint64_t read(void* dst, std::uint64_t n, std::uint64_t at) const;

  std::shared_ptr<const RemoteObject> object_;
  std::map<std::uint64_t, ByteVector> spans_;  // by offset; never overlapping
};

// A ZipArchive reader for the zip that is the whole of `object`: its head (what open() brought),
// its last 128 KiB, its central directory and every local header it points to, fetched ahead. A
// directory it cannot make sense of is not an error here: minizip then reads on demand and says
// what is wrong.
ZipReadAt remoteZipReader(std::shared_ptr<const RemoteObject> object);

}  // namespace stoker
