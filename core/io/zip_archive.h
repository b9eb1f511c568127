// io/zip_archive: a torch.save zip -- a whole .pt file, or one DCP item inside
// a .distcp file -- read through minizip over a byte range of an open file (or
// of anything a ZipReadAt reads: a remote object, io/remote_zip_reader): its
// records, where a stored record's bytes lie in the file, and their contents.
// Torch-free; mapped reads are the caller's (pread the offsets).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace stoker {

// Reads up to `n` bytes at file offset `at` into `dst` and returns how many it read. Fewer is
// allowed (the caller asks again from there); 0 means the file ends or cannot be read there (the
// zip is then reported corrupt). It may throw: the exception reaches the caller of open() or
// read(), never minizip.
using ZipReadAt = std::function<std::uint64_t(void* dst, std::uint64_t n, std::uint64_t at)>;

// A ZipReadAt over an open file descriptor (pread); Error(Io) naming `subject` when a read fails.
ZipReadAt zipFileReader(int fd, const std::string& subject);

class ZipArchive {
 public:
  struct Record {
    std::string name;             // without the archive's top folder ("data.pkl", "data/0")
    std::uint64_t dataOffset = 0; // absolute file offset of the record's bytes (stored records)
    std::uint64_t size = 0;       // uncompressed size
    bool stored = true;           // false: deflated (torch.save never does; other zip tools may)
  };

  // Reads the central directory of the zip that is `length` bytes at `offset` in `fd` (which the
  // caller keeps open while the archive is used). Throws Error(BadInput) naming `subject` for a
  // corrupt or encrypted zip.
  static ZipArchive open(int fd, std::uint64_t offset, std::uint64_t length, const std::string& subject);
  // The same through `read`, which the archive keeps for read().
  static ZipArchive open(ZipReadAt read, std::uint64_t offset, std::uint64_t length, const std::string& subject);

  const std::vector<Record>& records() const { return records_; }
  const Record* find(const std::string& name) const;
  // A record's bytes (read in place for stored records, inflated otherwise).
  std::vector<std::uint8_t> read(const Record& r) const;

 private:
  ZipReadAt readAt_;
  std::uint64_t offset_ = 0, length_ = 0;
  std::string subject_;
  std::string prefix_;  // the top folder, "archive/"
  std::vector<Record> records_;
};

}  // namespace stoker
