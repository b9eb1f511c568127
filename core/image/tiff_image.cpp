#include "image/tiff_image.h"

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>

#include "util/error.h"

namespace stoker {
namespace {

// The encoded bytes as a read-only libtiff "file". Opened with "rm": 'm' turns libtiff's mapping
// off, so mapProc is never asked and strips are copied out through readProc (a strip's copy is
// small beside its decode; mapProc stays for a caller that opens with "r").
struct Memory {
  const std::uint8_t* data;
  std::size_t size;
  toff_t at = 0;
  std::string error;  // libtiff's first error message
};

tmsize_t readProc(thandle_t h, void* dst, tmsize_t n) {
  auto* m = static_cast<Memory*>(h);
  if (m->at >= m->size || n <= 0) return 0;
  const std::size_t k = std::min(static_cast<std::size_t>(n), static_cast<std::size_t>(m->size - m->at));
  std::memcpy(dst, m->data + m->at, k);
  m->at += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t writeProc(thandle_t, void*, tmsize_t) { return 0; }
toff_t seekProc(thandle_t h, toff_t off, int whence) {
  auto* m = static_cast<Memory*>(h);
  const toff_t base = whence == SEEK_CUR ? m->at : whence == SEEK_END ? m->size : 0;
  m->at = base + off;  // past the end is allowed; reads there return nothing
  return m->at;
}
int closeProc(thandle_t) { return 0; }
toff_t sizeProc(thandle_t h) { return static_cast<Memory*>(h)->size; }
int mapProc(thandle_t h, void** base, toff_t* size) {
  auto* m = static_cast<Memory*>(h);
  *base = const_cast<std::uint8_t*>(m->data);
  *size = m->size;
  return 1;
}
void unmapProc(thandle_t, void*, toff_t) {}

int onError(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* m = static_cast<Memory*>(user);
  if (m->error.empty()) {
    char text[512];
    std::vsnprintf(text, sizeof text, fmt, ap);
    m->error = std::string(module ? module : "libtiff") + ": " + text;
  }
  return 1;  // handled: nothing reaches libtiff's global handler (stderr)
}
int onWarning(TIFF*, void*, const char*, const char*, va_list) { return 1; }  // unknown tags and the like

struct TiffClose {
  void operator()(TIFF* t) const { TIFFClose(t); }
};

std::unique_ptr<TIFF, TiffClose> openTiff(Memory& m, const std::string& name) {
  std::unique_ptr<TIFFOpenOptions, void (*)(TIFFOpenOptions*)> options(TIFFOpenOptionsAlloc(), TIFFOpenOptionsFree);
  if (!options) throw Error(ErrorKind::Io, name, "out of memory for a TIFF decoder");
  TIFFOpenOptionsSetErrorHandlerExtR(options.get(), onError, &m);
  TIFFOpenOptionsSetWarningHandlerExtR(options.get(), onWarning, &m);
  TIFFOpenOptionsSetMaxSingleMemAlloc(options.get(), tmsize_t(1) << 30);  // a lying header cannot ask for more
  std::unique_ptr<TIFF, TiffClose> t(
      TIFFClientOpenExt(name.c_str(), "rm", &m, readProc, writeProc, seekProc, closeProc, sizeProc, mapProc, unmapProc, options.get()));
  if (!t) throwBadInput(name, "corrupt TIFF (" + (m.error.empty() ? std::string("libtiff could not open it") : m.error) + ")");
  return t;
}

// The Orientation tag (1-8, 1 where absent or out of range).
int orientationOf(TIFF* t) {
  std::uint16_t o = ORIENTATION_TOPLEFT;
  TIFFGetFieldDefaulted(t, TIFFTAG_ORIENTATION, &o);
  return o >= 1 && o <= 8 ? o : ORIENTATION_TOPLEFT;
}

// Orientations 5-8 put the stored rows in columns: the image's width and height swap.
bool transposes(int orientation) { return orientation >= ORIENTATION_LEFTTOP; }

// The stored pixel that lands at (x, y) of the image as PIL shows it: Pillow's TiffImagePlugin
// transposes the stored rows by the Orientation tag (FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM,
// TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90 for 2-8). `sw` x `sh` is the stored size.
std::size_t storedPixel(int orientation, std::size_t x, std::size_t y, std::size_t sw, std::size_t sh) {
  switch (orientation) {
    case 2: return y * sw + (sw - 1 - x);
    case 3: return (sh - 1 - y) * sw + (sw - 1 - x);
    case 4: return (sh - 1 - y) * sw + x;
    case 5: return x * sw + y;
    case 6: return (sh - 1 - x) * sw + y;
    case 7: return (sh - 1 - x) * sw + (sw - 1 - y);
    case 8: return x * sw + (sw - 1 - y);
    default: return y * sw + x;
  }
}

}  // namespace

bool isTiff(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return false;
  return (data[0] == 'I' && data[1] == 'I' && (data[2] == 42 || data[2] == 43) && data[3] == 0) ||
         (data[0] == 'M' && data[1] == 'M' && data[2] == 0 && (data[3] == 42 || data[3] == 43));
}

ImageSize tiffSize(const std::uint8_t* data, std::size_t size, const std::string& name) {
  Memory m{data, size, 0, {}};
  auto t = openTiff(m, name);
  std::uint32_t w = 0, h = 0;
  if (!TIFFGetField(t.get(), TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t.get(), TIFFTAG_IMAGELENGTH, &h))
    throwBadInput(name, "corrupt TIFF (no image width or length)");
  char why[1024];
  if (!TIFFRGBAImageOK(t.get(), why)) throwBadInput(name, std::string("unsupported TIFF (libtiff: ") + why + ")");
  if (w > (1u << 20) || h > (1u << 20)) throwBadInput(name, "TIFF dimensions are too large");
  if (transposes(orientationOf(t.get()))) std::swap(w, h);  // PIL turns the image on its side
  return {static_cast<int>(w), static_cast<int>(h)};
}

void decodeTiff(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                PixelBuffer& out, std::size_t slack) {
  Memory m{data, size, 0, {}};
  auto t = openTiff(m, name);
  const std::size_t pixels = static_cast<std::size_t>(image.width) * static_cast<std::size_t>(image.height);
  thread_local std::vector<std::uint32_t, UninitialisedAllocator<std::uint32_t>> rgba;  // libtiff fills it, or errs
  struct Release {
    ~Release() { releaseIfHuge(rgba); }
  } release;
  rgba.resize(pixels);
  // TIFFReadRGBAImageOriented's steps, with two changes so that the pixels equal PIL's:
  // - libtiff premultiplies unassociated alpha into the colours (through its UaToAa table), where
  //   PIL's convert("RGB") keeps them as stored. An identity table keeps them too (up to 254 levels
  //   apart otherwise, in tst_image_datasets).
  // - libtiff rounds 16-bit samples to 8 bits ((v + 128) / 257), where PIL's RGB;16 unpackers keep
  //   the high byte. A high-byte table does the same (one level apart otherwise).
  char why[1024] = "";
  TIFFRGBAImage img;
  if (!TIFFRGBAImageBegin(&img, t.get(), 0, why))
    throwBadInput(name, std::string("unsupported TIFF (libtiff: ") + why + ")");
  if (img.UaToAa)
    for (int a = 0; a < 256; ++a)
      for (int v = 0; v < 256; ++v) img.UaToAa[a * 256 + v] = static_cast<std::uint8_t>(v);
  if (img.Bitdepth16To8)
    for (int v = 0; v < 65536; ++v) img.Bitdepth16To8[v] = static_cast<std::uint8_t>(v >> 8);
  // The rows as stored (libtiff flips nothing when asked for the file's own orientation), then
  // turned as PIL turns them. libtiff's own turn only flips: 5 came out as stored, 6 and 8 mirrored,
  // at the stored size, where PIL rotates them.
  const int orientation = orientationOf(t.get());
  const std::size_t sw = static_cast<std::size_t>(transposes(orientation) ? image.height : image.width);
  const std::size_t sh = pixels / sw;
  img.req_orientation = img.orientation;
  const int ok = TIFFRGBAImageGet(&img, rgba.data(), static_cast<std::uint32_t>(sw), static_cast<std::uint32_t>(sh));
  TIFFRGBAImageEnd(&img);
  if (!ok || !m.error.empty())
    throwBadInput(name, "corrupt or truncated TIFF (" + (m.error.empty() ? std::string("libtiff could not read it") : m.error) + ")");
  if (out.size() < pixels * 3 + slack) out.resize(pixels * 3 + slack);
  const auto width = static_cast<std::size_t>(image.width);
  // Associated (premultiplied) alpha comes as stored; PIL reads it as RGBa and un-premultiplies it
  // (Unpack.c's unpackRGBa: c * 255 / a, clipped; 0 where a is 0).
  const bool associated = img.alpha == EXTRASAMPLE_ASSOCALPHA;
  for (std::size_t i = 0; i < pixels; ++i) {
    const std::uint32_t p = orientation == ORIENTATION_TOPLEFT ? rgba[i] : rgba[storedPixel(orientation, i % width, i / width, sw, sh)];
    std::uint32_t r = TIFFGetR(p), g = TIFFGetG(p), b = TIFFGetB(p);
    if (associated) {
      const std::uint32_t a = TIFFGetA(p);
      if (a == 0) {
        r = g = b = 0;
      } else if (a < 255) {
        r = std::min<std::uint32_t>(255, r * 255 / a);
        g = std::min<std::uint32_t>(255, g * 255 / a);
        b = std::min<std::uint32_t>(255, b * 255 / a);
      }
    }
    out[i * 3] = static_cast<std::uint8_t>(r);
    out[i * 3 + 1] = static_cast<std::uint8_t>(g);
    out[i * 3 + 2] = static_cast<std::uint8_t>(b);
  }
}

}  // namespace stoker
