// Fuzz target: an encoded image (JPEG through libjpeg-turbo, PNG through libspng, WebP through
// libwebp, TIFF through libtiff, BMP through stb_image) as the image datasets decode each sample:
// the header, then the whole image and a crop at 1/2 scale where the format can scale (a gray JPEG's
// as one channel, as the pipeline asks for it). Every
// returned pixel is read, so ASan sees a region that overruns its buffer. The whole decode records
// a JPEG scan index (image/jpeg_scan_index); a crop decoded from it must equal a plain decode.
#include "fuzz_target.h"
#include "image/image_decoder.h"
#include "image/jpeg_scan_index.h"

#include <cstring>

using stoker::fuzz::check;

namespace {

void touch(const stoker::RgbRegion& r, stoker::PixelRect want) {
  check(r.pixels != nullptr, "a decoded region has pixels");
  check(r.channels == 1 || r.channels == 3, "a region has 1 or 3 channels");
  unsigned sum = 0;
  for (int y = 0; y < want.height; ++y)
    for (int x = 0; x < want.width * r.channels; ++x)
      sum += r.pixels[(want.y - r.rect.y + y) * r.stride + (want.x - r.rect.x) * r.channels + x];
  (void)sum;
}

}  // namespace

STOKER_FUZZ_TARGET(image_decode) {
  stoker::ImageDecoder decoder;
  const stoker::ImageSize s = decoder.open(data, size, "fuzz");
  check(s.width > 0 && s.height > 0, "an accepted image has pixels");
  // Valid but huge headers only cost time: decode what a few MiB of pixels hold.
  if (static_cast<std::int64_t>(s.width) * s.height > (4 << 20)) return;
  const stoker::PixelRect whole{0, 0, s.width, s.height};
  stoker::JpegIndexCache cache(1, std::size_t{1} << 24);
  const stoker::JpegIndexSlot slot{&cache, 0};
  touch(decoder.decode(whole, 1, slot), whole);
  if (decoder.canScale()) {
    decoder.open(data, size, "fuzz");  // a JPEG decode ends with libjpeg back at its start state
    const stoker::ImageSize half = decoder.scaledSize(2);
    const stoker::PixelRect crop{half.width / 4, half.height / 4, std::max(1, half.width / 2), std::max(1, half.height / 2)};
    touch(decoder.decode(crop, 2, slot, /*keepGray=*/true), crop);  // as the image pipeline asks
    // The whole image decoded, so every MCU is there: a crop from the index is the plain crop.
    const stoker::PixelRect inner{s.width / 3, s.height / 3, std::max(1, s.width / 3), std::max(1, s.height / 3)};
    decoder.open(data, size, "fuzz");
    const stoker::RgbRegion a = decoder.decode(inner, 1, slot);
    stoker::ImageDecoder plain;
    plain.open(data, size, "fuzz");
    const stoker::RgbRegion b = plain.decode(inner, 1);
    for (int y = 0; y < inner.height; ++y)
      check(std::memcmp(a.pixels + (inner.y - a.rect.y + y) * a.stride + (inner.x - a.rect.x) * 3,
                        b.pixels + (inner.y - b.rect.y + y) * b.stride + (inner.x - b.rect.x) * 3,
                        static_cast<std::size_t>(inner.width) * 3) == 0,
            "a crop decoded from the scan index equals a plain decode");
  }
}
