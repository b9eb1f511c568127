// image/image_decoder: JPEG (libjpeg-turbo), PNG (libspng), WebP (libwebp), TIFF (libtiff) and BMP
// (stb_image) into RGB u8, decoding only what a transform needs. A decoder belongs to one thread
// and keeps its buffers between images.
//
//   ImageDecoder d;
//   ImageSize s = d.open(bytes, size, "cat/001.jpg");        // the header only
//   RgbRegion r = d.decode({x, y, w, h}, d.scaledSize(2));   // rows/columns of the 1/2-scaled image
//
// JPEG: DCT-domain scaling (1/2, 1/4, 1/8 through scale_denom), the region's rows by
// jpeg_skip_scanlines and its columns by jpeg_crop_scanline (widened to iMCU boundaries, so the
// region returned may start left of the one asked for). The other formats decode whole (scale 1
// only).
// Errors throw Error(BadInput) naming the image: corrupt or truncated data ("premature end"), an
// unknown format, dimensions past kMaxImagePixels.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "image/jpeg_scan_index.h"
#include "image/pixel_buffer.h"

namespace stoker {

enum class ImageFormat { Unknown, Jpeg, Png, Webp, Tiff, Bmp, Pnm };
ImageFormat sniffImageFormat(const std::uint8_t* data, std::size_t size);
const char* imageFormatName(ImageFormat f);

// PIL's own limit: Image.open raises DecompressionBombError past 2 * MAX_IMAGE_PIXELS, so no image
// torchvision can read is refused, and no forged header makes a worker claim more.
inline constexpr std::int64_t kMaxImagePixels = 178956970;

struct ImageSize {
  int width = 0, height = 0;
};

struct PixelRect {
  int x = 0, y = 0, width = 0, height = 0;
};

// Pixel (x, y) of the (scaled) image is at pixels + (y - rect.y) * stride + (x - rect.x) * channels:
// 3 bytes R, G, B, or 1 for a gray image (its R, G and B, equal), when the caller asked for that.
struct RgbRegion {
  const std::uint8_t* pixels = nullptr;
  std::ptrdiff_t stride = 0;
  PixelRect rect;
  int channels = 3;
};

class ImageDecoder {
 public:
  ImageDecoder();
  ~ImageDecoder();
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  // Reads the header of `data` (kept, not copied: it must outlive decode()). `name` goes into errors.
  ImageSize open(const std::uint8_t* data, std::size_t size, const std::string& name);
  ImageFormat format() const { return format_; }
  // The image's size when decoded at 1/denom (denom 1, 2, 4 or 8; JPEG only for denom > 1).
  ImageSize scaledSize(int denom) const;
  bool canScale() const { return format_ == ImageFormat::Jpeg; }
  // Decodes `want` (in the 1/denom image's pixels, clipped to it) and returns a region that covers it.
  // Once per open(): a JPEG decode leaves libjpeg at its start state (decode again after open()).
  // A baseline JPEG entropy-decodes only the MCUs `want` needs when `slot` names a cache holding its
  // scan index (image/jpeg_scan_index), and records or extends that index otherwise. With
  // `keepGray`, a grayscale JPEG comes back as one channel (RgbRegion::channels 1) instead of three
  // equal ones: a third of the bytes, and a resampler can resize one plane instead of three.
  RgbRegion decode(PixelRect want, int denom, JpegIndexSlot slot = {}, bool keepGray = false);
  // The last JPEG decode's MCUs: how many libjpeg asked for and how many were entropy-decoded
  // (hooked: it went through the scan index; asked = decoded = 0 otherwise).
  struct EntropyMcus {
    bool hooked = false;
    std::int64_t asked = 0, decoded = 0;
  };
  EntropyMcus lastEntropyMcus() const;

 private:
  struct Jpeg;
  RgbRegion decodePng();
  RgbRegion wholeImage();
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  ImageFormat format_ = ImageFormat::Unknown;
  ImageSize size0_;
  bool jpegEnds_ = true;  // an EOI marker follows the JPEG's first scan (see open())
  std::unique_ptr<Jpeg> jpeg_;
  PixelBuffer pixels_;
};

}  // namespace stoker
