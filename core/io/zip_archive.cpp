#include "io/zip_archive.h"

#include <minizip/unzip.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "util/error.h"
#include "util/pread_full.h"

namespace stoker {
namespace {

// minizip's file functions over [base, base + length) of what `read` reads: the zip sees only its
// range. An exception from `read` is kept here (minizip is C: nothing may unwind through it) and
// thrown again once minizip returned.
struct Range {
  const ZipReadAt* read;
  std::uint64_t base, length;
  std::exception_ptr failure;
  void rethrow() const {
    if (failure) std::rethrow_exception(failure);
  }
};
// minizip reads headers a byte or two at a time: a cursor serves those from a read-ahead window
// (one pread per 16 KiB instead of ~500 per record).
struct Cursor {
  Range* range = nullptr;
  std::uint64_t pos = 0;
  std::vector<char> window;
  std::uint64_t windowAt = 0;
};

std::uint64_t preadRange(Range& range, char* buf, std::uint64_t want, std::uint64_t at) {
  if (range.failure) return 0;
  try {
    return std::min(want, (*range.read)(buf, want, range.base + at));  // short: minizip reports the zip corrupt
  } catch (...) {
    range.failure = std::current_exception();
    return 0;
  }
}

voidpf rangeOpen(voidpf opaque, const void* /*name*/, int /*mode*/) {
  auto* c = new Cursor;
  c->range = static_cast<Range*>(opaque);
  return c;
}
uLong rangeRead(voidpf, voidpf stream, void* buf, uLong size) {
  constexpr std::uint64_t kWindow = 16 << 10;
  auto* c = static_cast<Cursor*>(stream);
  std::uint64_t total = 0;
  // A reader may answer short (a remote zip's reader serves what it fetched ahead, io/remote_zip_reader):
  // go on from where it stopped until minizip has what it asked for.
  while (total < size && c->pos < c->range->length) {
    const std::uint64_t want = std::min<std::uint64_t>(size - total, c->range->length - c->pos);
    char* out = static_cast<char*>(buf) + total;
    std::uint64_t done;
    if (want >= kWindow) {
      done = preadRange(*c->range, out, want, c->pos);
    } else {
      if (c->pos < c->windowAt || c->pos >= c->windowAt + c->window.size()) {
        c->window.resize(static_cast<std::size_t>(std::min(kWindow, c->range->length - c->pos)));
        c->window.resize(static_cast<std::size_t>(preadRange(*c->range, c->window.data(), c->window.size(), c->pos)));
        c->windowAt = c->pos;
      }
      done = std::min<std::uint64_t>(want, c->windowAt + c->window.size() - c->pos);
      std::memcpy(out, c->window.data() + (c->pos - c->windowAt), static_cast<std::size_t>(done));
    }
    if (done == 0) break;
    c->pos += done;
    total += done;
  }
  return static_cast<uLong>(total);
}
uLong rangeWrite(voidpf, voidpf, const void*, uLong) { return 0; }
ZPOS64_T rangeTell(voidpf, voidpf stream) { return static_cast<Cursor*>(stream)->pos; }
long rangeSeek(voidpf, voidpf stream, ZPOS64_T offset, int origin) {
  auto* c = static_cast<Cursor*>(stream);
  std::uint64_t base = origin == ZLIB_FILEFUNC_SEEK_CUR ? c->pos : origin == ZLIB_FILEFUNC_SEEK_END ? c->range->length : 0;
  if (offset > c->range->length || base + offset > c->range->length) return -1;
  c->pos = base + offset;
  return 0;
}
int rangeClose(voidpf, voidpf stream) {
  delete static_cast<Cursor*>(stream);
  return 0;
}
int rangeError(voidpf, voidpf) { return 0; }

class Unzip {
 public:
  explicit Unzip(Range& range) {
    zlib_filefunc64_def io{};
    io.zopen64_file = rangeOpen;
    io.zread_file = rangeRead;
    io.zwrite_file = rangeWrite;
    io.ztell64_file = rangeTell;
    io.zseek64_file = rangeSeek;
    io.zclose_file = rangeClose;
    io.zerror_file = rangeError;
    io.opaque = &range;
    uf_ = unzOpen2_64("zip", &io);
  }
  ~Unzip() {
    if (uf_) unzClose(uf_);
  }
  Unzip(const Unzip&) = delete;
  Unzip& operator=(const Unzip&) = delete;
  unzFile get() const { return uf_; }

 private:
  unzFile uf_ = nullptr;
};

}  // namespace

ZipReadAt zipFileReader(int fd, const std::string& subject) {
  return [fd, subject](void* dst, std::uint64_t n, std::uint64_t at) -> std::uint64_t {
    const long long r = preadFull(fd, dst, static_cast<std::size_t>(n), at);
    if (r < 0) throwIo(subject, "read failed", errno);
    return static_cast<std::uint64_t>(r);
  };
}

ZipArchive ZipArchive::open(int fd, std::uint64_t offset, std::uint64_t length, const std::string& subject) {
  return open(zipFileReader(fd, subject), offset, length, subject);
}

ZipArchive ZipArchive::open(ZipReadAt read, std::uint64_t offset, std::uint64_t length, const std::string& subject) {
  ZipArchive z;
  z.readAt_ = std::move(read);
  z.offset_ = offset;
  z.length_ = length;
  z.subject_ = subject;
  Range range{&z.readAt_, offset, length, nullptr};
  Unzip uf(range);
  range.rethrow();
  if (!uf.get()) throwBadInput(subject, "is a corrupt zip (no readable central directory)");
  auto fail = [&](const std::string& why) {
    range.rethrow();  // a read that failed is the error, not the zip
    throwBadInput(subject, "is a corrupt zip: " + why);
  };
  std::string prefix;
  for (int rc = unzGoToFirstFile(uf.get()); rc != UNZ_END_OF_LIST_OF_FILE; rc = unzGoToNextFile(uf.get())) {
    if (rc != UNZ_OK) fail("cannot walk its central directory");
    unz_file_info64 info{};
    char name[1024];
    if (unzGetCurrentFileInfo64(uf.get(), &info, name, sizeof name, nullptr, 0, nullptr, 0) != UNZ_OK)
      fail("a central directory entry is unreadable");
    if (info.size_filename >= sizeof name) fail("a record name is longer than 1023 bytes");
    if (info.flag & 1) throwBadInput(subject, "holds encrypted records");
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED)
      fail("record " + std::string(name) + " uses compression method " + std::to_string(info.compression_method));
    // torch.save puts every record under one top folder ("archive/", or the file's stem).
    std::string full(name);
    const auto slash = full.find('/');
    if (prefix.empty() && slash != std::string::npos) prefix = full.substr(0, slash + 1);
    Record r;
    r.name = !prefix.empty() && full.rfind(prefix, 0) == 0 ? full.substr(prefix.size()) : full;
    r.size = info.uncompressed_size;
    r.stored = info.compression_method == 0;
    if (unzOpenCurrentFile(uf.get()) != UNZ_OK) fail("the local header of " + full + " is unreadable");
    const ZPOS64_T at = unzGetCurrentFileZStreamPos64(uf.get());
    unzCloseCurrentFile(uf.get());
    range.rethrow();
    if (r.stored && (info.compressed_size != info.uncompressed_size || at > length || r.size > length - at))
      fail("record " + full + " runs past the end of the zip");
    // Deflate expands at most ~1032:1; a record claiming more would have us allocate what it claims.
    if (!r.stored && (info.compressed_size > length || info.uncompressed_size > info.compressed_size * 1032 + 1024))
      fail("record " + full + " claims " + std::to_string(info.uncompressed_size) + " bytes from " +
           std::to_string(info.compressed_size) + " compressed");
    r.dataOffset = offset + at;
    z.records_.push_back(std::move(r));
  }
  range.rethrow();
  z.prefix_ = prefix;
  return z;
}

const ZipArchive::Record* ZipArchive::find(const std::string& name) const {
  for (const auto& r : records_)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::uint8_t> ZipArchive::read(const Record& r) const {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(r.size));
  if (r.stored) {
    std::uint64_t done = 0;
    while (done < out.size()) {
      const std::uint64_t n = readAt_(out.data() + done, out.size() - done, r.dataOffset + done);
      if (n == 0) throwBadInput(subject_, "ends inside record " + r.name);
      done += n;
    }
    return out;
  }
  Range range{&readAt_, offset_, length_, nullptr};
  Unzip uf(range);
  bool found = false;
  for (int rc = unzGoToFirstFile(uf.get()); rc == UNZ_OK; rc = unzGoToNextFile(uf.get())) {
    char name[1024];
    unz_file_info64 info{};
    if (unzGetCurrentFileInfo64(uf.get(), &info, name, sizeof name, nullptr, 0, nullptr, 0) != UNZ_OK) break;
    if (prefix_ + r.name == name) {
      found = true;
      break;
    }
  }
  if (!found || unzOpenCurrentFile(uf.get()) != UNZ_OK) {
    range.rethrow();
    throwBadInput(subject_, "cannot open record " + r.name);
  }
  std::size_t done = 0;
  while (done < out.size()) {  // minizip reads at most INT_MAX bytes per call
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(out.size() - done, 1u << 30));
    const int n = unzReadCurrentFile(uf.get(), out.data() + done, chunk);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const int crc = unzCloseCurrentFile(uf.get());
  range.rethrow();
  if (done != out.size() || crc != UNZ_OK)
    throwBadInput(subject_, "record " + r.name + " does not inflate to its size (or fails its CRC)");
  return out;
}

}  // namespace stoker
