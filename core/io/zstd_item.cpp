#include "io/zstd_item.h"

#include <zstd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <memory>

#include "util/error.h"
#include "util/pread_full.h"

namespace stoker {
namespace {

bool isZstdDescriptor(const std::string& d) {
  // "name[@local-domain][/version]"; DCP's ZStandard accepts major version 1.
  const std::string prefix = "stream.zstd/";
  if (d.rfind(prefix, 0) != 0) return false;
  const std::string version = d.substr(prefix.size());
  return version == "1" || version.rfind("1.", 0) == 0;
}

}  // namespace

bool isZstd(const std::vector<std::string>& transforms) {
  return transforms.size() == 1 && isZstdDescriptor(transforms.front());
}

std::string unsupportedTransforms(const std::vector<std::string>& transforms) {
  if (transforms.empty() || isZstd(transforms)) return {};
  for (const auto& t : transforms)
    if (!isZstdDescriptor(t)) return "items with transform " + t + " are not supported (only stream.zstd/1)";
  return "items with " + std::to_string(transforms.size()) + " stacked transforms are not supported";
}

std::uint64_t decompressZstdItem(int fd, std::uint64_t offset, std::uint64_t length, std::uint64_t maxBytes,
                                 const std::string& subject, const ZstdSink& sink) {
  return decompressZstdItem(zipFileReader(fd, subject), offset, length, maxBytes, subject, sink);
}

std::uint64_t decompressZstdItem(const ZipReadAt& read, std::uint64_t offset, std::uint64_t length,
                                 std::uint64_t maxBytes, const std::string& subject, const ZstdSink& sink) {
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!ctx) throw Error(ErrorKind::Io, subject, "cannot allocate a zstd decoder");
  const std::string where = "zstd item at offset " + std::to_string(offset);
  constexpr std::size_t kWindow = 1 << 20;
  std::vector<std::uint8_t> in(static_cast<std::size_t>(std::min<std::uint64_t>(length, kWindow)));
  std::unique_ptr<std::uint8_t[]> window(new std::uint8_t[kWindow]);  // not zero-filled: written before read
  std::uint64_t total = 0;
  std::size_t hint = 1;  // ZSTD_decompressStream's: 0 once a frame is complete and flushed
  std::uint64_t readSoFar = 0;
  auto step = [&](ZSTD_inBuffer& src) {
    ZSTD_outBuffer dst{window.get(), kWindow, 0};
    hint = ZSTD_decompressStream(ctx.get(), &dst, &src);
    if (ZSTD_isError(hint)) throwBadInput(subject, where + " does not decompress: " + ZSTD_getErrorName(hint));
    if (dst.pos > maxBytes - std::min(total, maxBytes))
      throwBadInput(subject, where + " decompresses to more than " + std::to_string(maxBytes) +
                                 " bytes, more than its chunk can hold");
    total += dst.pos;
    if (dst.pos > 0) sink(window.get(), dst.pos);
    return dst.pos;
  };
  while (readSoFar < length) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), length - readSoFar));
    std::size_t got = 0;
    while (got < n) {
      const std::uint64_t k = read(in.data() + got, n - got, offset + readSoFar + got);
      if (k == 0) throwBadInput(subject, where + " runs past the end of its file");
      got += static_cast<std::size_t>(k);
    }
    readSoFar += n;
    ZSTD_inBuffer src{in.data(), n, 0};
    while (src.pos < src.size) step(src);
  }
  // What the decoder still holds (a frame's last block) comes out of calls without input.
  ZSTD_inBuffer none{nullptr, 0, 0};
  while (hint != 0 && step(none) > 0) {
  }
  if (hint != 0) throwBadInput(subject, where + " ends in the middle of a zstd frame (truncated)");
  return total;
}

std::vector<std::uint8_t> decompressZstdItem(const ZipReadAt& read, std::uint64_t offset, std::uint64_t length,
                                             std::uint64_t maxBytes, const std::string& subject) {
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(maxBytes));
  decompressZstdItem(read, offset, length, maxBytes, subject,
                     [&](const std::uint8_t* p, std::size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

}  // namespace stoker
