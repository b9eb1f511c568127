#include "image/bmp_image.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "util/error.h"

// stb_image's implementation, private to this file (STB_IMAGE_STATIC), with only the BMP decoder
// and no stdio; its code is not ours to warn about.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_MAX_DIMENSIONS (1 << 20)
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace stoker {

bool isBmp(const std::uint8_t* data, std::size_t size) { return size >= 2 && data[0] == 'B' && data[1] == 'M'; }

namespace {

[[noreturn]] void refuse(const std::string& name) {
  const char* why = stbi_failure_reason();
  throwBadInput(name, std::string("corrupt or unsupported BMP (stb_image: ") + (why ? why : "unknown") +
                          "; Stoker decodes BMPs without RLE compression)");
}

}  // namespace

namespace {

std::uint32_t le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 | static_cast<std::uint32_t>(p[2]) << 16 |
         static_cast<std::uint32_t>(p[3]) << 24;
}
std::uint16_t le16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | p[1] << 8); }

// The fields of a BITMAPINFOHEADER (or a later one) that stb_image does not check; nullopt for the
// old 12-byte OS/2 header or a file too short for one, which are left to stb.
struct InfoHeader {
  std::uint64_t offset;    // where the pixels start (bfOffBits)
  std::uint32_t size;      // the info header's own size (40 and more)
  std::uint32_t compression;
  unsigned bpp;
};
std::optional<InfoHeader> infoHeaderOf(const std::uint8_t* data, std::size_t size) {
  if (size < 54 || le32(data + 14) < 40) return std::nullopt;
  return InfoHeader{le32(data + 10), le32(data + 14), le32(data + 30), le16(data + 28)};
}

// What stb_image does not check before it allocates and fills the image, from the file's headers
// (BITMAPINFOHEADER and later; the old 12-byte OS/2 header is left to stb):
// - a palette image whose pixel offset lies inside its headers: stb's palette size came out
//   negative, no entry was read, and every colour came from its uninitialised stack (pixels that
//   changed from run to run; PIL reads the pixels from the offset written, or after the palette
//   where it is 0: refused here, as corrupt);
// - an uncompressed image cut short: stb allocated and zero-filled the whole image (up to 537 MB
//   for a 54-byte file) before the end was noticed. Refused with PIL's rule: every row but the
//   last with its padding, the last without.
void checkBmpHeaders(const std::uint8_t* data, std::size_t size, int width, int height, const std::string& name) {
  const std::optional<InfoHeader> info = infoHeaderOf(data, size);
  if (!info) return;
  const std::uint64_t offset = info->offset, headers = 14 + static_cast<std::uint64_t>(info->size);
  const unsigned bpp = info->bpp;
  const std::uint32_t compression = info->compression;
  if (bpp <= 8 && offset < headers)
    throwBadInput(name, "BMP whose pixel data offset " + std::to_string(offset) + " lies inside its " + std::to_string(headers) +
                            " bytes of headers (corrupt)");
  if ((compression == 0 || compression == 3) && offset >= headers && (bpp == 1 || bpp == 4 || bpp == 8 || bpp == 16 || bpp == 24 || bpp == 32)) {
    const std::uint64_t rowBytes = (static_cast<std::uint64_t>(width) * bpp + 7) / 8, stride = (rowBytes + 3) / 4 * 4;
    if (offset + stride * (static_cast<std::uint64_t>(height) - 1) + rowBytes > size)
      throwBadInput(name, "truncated BMP (premature end of data)");
  }
}

}  // namespace

ImageSize bmpSize(const std::uint8_t* data, std::size_t size, const std::string& name) {
  int w = 0, h = 0, channels = 0;
  if (size > static_cast<std::size_t>(INT32_MAX)) throwBadInput(name, "BMP larger than 2 GiB");
  if (!stbi_info_from_memory(data, static_cast<int>(size), &w, &h, &channels)) refuse(name);
  // A negative height is a top-down BMP (rows stored first to last), which stb's info returns as
  // written: every one was refused as an image of Wx-H pixels. stb's decoder flips it itself.
  if (h == INT_MIN) refuse(name);
  h = std::abs(h);
  if (w >= 1 && h >= 1 && static_cast<std::int64_t>(w) * h <= kMaxImagePixels) checkBmpHeaders(data, size, w, h, name);
  return {w, h};
}

// Bytes for stb_image through its callbacks, to tell a truncated file from a whole one: stb pads a
// short BMP with zeros (a black bottom), where PIL refuses it. stb's BMP reader takes every byte
// through refills of its 128-byte buffer (get8/get16/get32; never stbi__getn), and a refill may come
// back short only at the end of a whole file. So a refill that finds nothing left means stb wanted
// pixels past the end: the file is cut short. (A short read of any other size would be a getn, which
// needs every byte it asks for.) A skip past the end is not flagged by itself: if pixels follow, their
// refill finds nothing; if it skipped the last row's padding, PIL does not need that either.
// tst_image_datasets cuts BMPs at every length and checks that Stoker refuses exactly what PIL does.
//
// A BMP of 16 bits or more whose pixels do not follow its headers (an optional colour table, a gap,
// a V5 header's profile before them): stb refuses it ("bad offset"), PIL reads the pixels at the
// offset written. stb is shown the file without the gap: the headers (their offset field saying
// the pixels follow them), then the bytes from the offset on (`joinAt`, `pixelsAt`).
struct Source {
  const std::uint8_t* data;
  std::size_t size, at = 0;
  bool overran = false;
  std::size_t joinAt = SIZE_MAX, pixelsAt = 0;  // where the shown file jumps to the pixels
  std::uint8_t header[256] = {};                // the first joinAt bytes, offset patched
  std::size_t shownSize() const { return joinAt == SIZE_MAX ? size : joinAt + (size - pixelsAt); }
  static int read(void* user, char* dst, int n) {
    auto* s = static_cast<Source*>(user);
    const auto want = static_cast<std::size_t>(std::max(n, 0));
    const std::size_t total = s->shownSize();
    const std::size_t k = std::min(want, total - std::min(s->at, total));
    if (k == 0 || (k < want && want != sizeof(stbi__context::buffer_start))) s->overran = true;
    if (s->joinAt == SIZE_MAX) {
      std::memcpy(dst, s->data + s->at, k);
    } else {
      std::size_t i = 0;
      for (; i < k && s->at + i < s->joinAt; ++i) dst[i] = static_cast<char>(s->header[s->at + i]);
      if (i < k) std::memcpy(dst + i, s->data + s->pixelsAt + (s->at + i - s->joinAt), k - i);
    }
    std::memset(dst + k, 0, want - k);
    s->at += k;
    return static_cast<int>(k);
  }
  static void skip(void* user, int n) {
    auto* s = static_cast<Source*>(user);
    s->at = n < 0 ? s->at - std::min(s->at, static_cast<std::size_t>(-static_cast<long>(n)))
                  : std::min(s->shownSize(), s->at + static_cast<std::size_t>(n));
  }
  static int eof(void* user) {
    auto* s = static_cast<Source*>(user);
    return s->at >= s->shownSize();
  }
  // The gap left out, where stb would refuse it (see above).
  void joinPixelsToHeaders() {
    const std::optional<InfoHeader> info = infoHeaderOf(data, size);
    if (!info) return;
    // What stb reads before the pixels: the file header, the info header, and a 40-byte header's
    // three BITFIELDS masks after it.
    const std::size_t headers = 14 + static_cast<std::size_t>(info->size) + (info->size == 40 && info->compression == 3 ? 12 : 0);
    const std::size_t offset = static_cast<std::size_t>(info->offset);
    if (info->bpp < 16 || offset <= headers || offset > size || headers > sizeof header) return;
    std::memcpy(header, data, headers);
    header[10] = static_cast<std::uint8_t>(headers), header[11] = static_cast<std::uint8_t>(headers >> 8);
    header[12] = header[13] = 0;
    joinAt = headers;
    pixelsAt = offset;
  }
};

void decodeBmp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
               PixelBuffer& out, std::size_t slack) {
  Source source{data, size};
  source.joinPixelsToHeaders();
  const stbi_io_callbacks io{Source::read, Source::skip, Source::eof};
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_callbacks(&io, &source, &w, &h, &channels, 3), stbi_image_free);
  if (!pixels) refuse(name);
  if (source.overran) throwBadInput(name, "truncated BMP (premature end of data)");
  if (w != image.width || h != image.height) throwBadInput(name, "BMP whose size changed between header and pixels");
  const std::size_t bytes = static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3;
  if (out.size() < bytes + slack) out.resize(bytes + slack);
  std::memcpy(out.data(), pixels.get(), bytes);
}

}  // namespace stoker
