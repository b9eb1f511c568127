#include "image/bmp_image.h"

#include <algorithm>
#include <cstring>
#include <memory>

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

ImageSize bmpSize(const std::uint8_t* data, std::size_t size, const std::string& name) {
  int w = 0, h = 0, channels = 0;
  if (size > static_cast<std::size_t>(INT32_MAX)) throwBadInput(name, "BMP larger than 2 GiB");
  if (!stbi_info_from_memory(data, static_cast<int>(size), &w, &h, &channels)) refuse(name);
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
struct Source {
  const std::uint8_t* data;
  std::size_t size, at = 0;
  bool overran = false;
  static int read(void* user, char* dst, int n) {
    auto* s = static_cast<Source*>(user);
    const auto want = static_cast<std::size_t>(std::max(n, 0));
    const std::size_t k = std::min(want, s->size - std::min(s->at, s->size));
    if (k == 0 || (k < want && want != sizeof(stbi__context::buffer_start))) s->overran = true;
    std::memcpy(dst, s->data + s->at, k);
    std::memset(dst + k, 0, want - k);
    s->at += k;
    return static_cast<int>(k);
  }
  static void skip(void* user, int n) {
    auto* s = static_cast<Source*>(user);
    s->at = n < 0 ? s->at - std::min(s->at, static_cast<std::size_t>(-static_cast<long>(n)))
                  : std::min(s->size, s->at + static_cast<std::size_t>(n));
  }
  static int eof(void* user) {
    auto* s = static_cast<Source*>(user);
    return s->at >= s->size;
  }
};

void decodeBmp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
               PixelBuffer& out, std::size_t slack) {
  Source source{data, size};
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
