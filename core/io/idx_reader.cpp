#include "io/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "io/byte_order.h"
#include "util/error.h"

namespace stoker {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to n bytes; gzread passes plain (non-gzip) files through as is.
std::size_t readSome(gzFile f, std::uint8_t* dst, std::size_t n, const std::string& path) {
  std::size_t done = 0;
  while (done < n) {
    unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
    int got = gzread(f, dst + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throwBadInput(path, std::string("cannot decompress: ") + (msg ? msg : "zlib error"));
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

}  // namespace

HostTensor readIdx(const std::string& path) {
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) throwIo(path, "cannot open", errno ? errno : ENOENT);
  gzbuffer(f.get(), 1 << 20);

  std::uint8_t magic[4];
  if (readSome(f.get(), magic, 4, path) != 4) throwBadInput(path, "shorter than the 4-byte IDX magic");
  if (magic[0] != 0 || magic[1] != 0) throwBadInput(path, "not an IDX file (bad magic)");
  Dtype dtype;
  switch (magic[2]) {
    case 0x08: dtype = Dtype::U8; break;
    case 0x09: dtype = Dtype::I8; break;
    case 0x0B: dtype = Dtype::I16; break;
    case 0x0C: dtype = Dtype::I32; break;
    case 0x0D: dtype = Dtype::F32; break;
    case 0x0E: dtype = Dtype::F64; break;
    default: throwBadInput(path, "unknown IDX type code " + std::to_string(magic[2]));
  }
  const int ndim = magic[3];
  if (ndim == 0) throwBadInput(path, "IDX file declares zero dimensions");

  HostTensor t;
  t.dtype = dtype;
  std::uint64_t elements = 1;
  for (int i = 0; i < ndim; ++i) {
    std::uint8_t be[4];
    if (readSome(f.get(), be, 4, path) != 4) throwBadInput(path, "truncated IDX dimension list");
    std::uint32_t d = loadBigEndian<std::uint32_t>(be);
    t.shape.push_back(d);
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements))
      throwBadInput(path, "IDX dimensions overflow");
  }
  const auto declared = dtypeBytesFor(dtype, elements);
  if (!declared) throwBadInput(path, "IDX dimensions overflow");
  const std::uint64_t nbytes = *declared;

  // Grow as data actually arrives (doubling from 1 MiB, at most 64 MiB a step), so a header
  // that lies about its size cannot make us allocate more than twice what the file holds.
  auto buffer = std::make_shared<std::vector<std::uint8_t>>();
  constexpr std::uint64_t kFirstStep = 1ull << 20, kMaxStep = 64ull << 20;
  while (buffer->size() < nbytes) {
    std::size_t have = buffer->size();
    const std::uint64_t step = std::clamp<std::uint64_t>(have, kFirstStep, kMaxStep);
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(nbytes - have, step));
    buffer->resize(have + want);
    std::size_t got = readSome(f.get(), buffer->data() + have, want, path);
    if (got < want)
      throwBadInput(path, "truncated: " + std::to_string(have + got) + " data bytes, header declares " +
                              std::to_string(nbytes));
  }
  std::uint8_t extra;
  if (readSome(f.get(), &extra, 1, path) != 0)
    throwBadInput(path, "more data than the IDX header declares");

  swapToNative(buffer->data(), nbytes, dtypeBits(dtype) / 8, /*sourceBigEndian=*/true);
  t.data = buffer->data();
  t.nbytes = nbytes;
  t.owner = std::move(buffer);
  return t;
}

}  // namespace stoker
