// image/tiff_image: TIFF through libtiff (the library PIL decodes compressed TIFFs with): the first
// page, whole, through TIFFReadRGBAImageOriented, which turns every photometric interpretation
// libtiff knows (RGB, gray, palette, YCbCr, CMYK ...) into RGBA; alpha is dropped. libtiff's
// messages go into the error that names the file, never to stderr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "image/image_decoder.h"

namespace stoker {

bool isTiff(const std::uint8_t* data, std::size_t size);  // "II*\0", "MM\0*" (and BigTIFF's "+")

// The first page's size; throws Error(BadInput) naming `name` (corrupt, or a layout libtiff's
// RGBA reader does not handle).
ImageSize tiffSize(const std::uint8_t* data, std::size_t size, const std::string& name);

// Decodes the first page as RGB rows of image.width * 3 bytes into `out`, grown to hold them plus
// `slack` bytes; throws Error(BadInput) naming `name`.
void decodeTiff(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                PixelBuffer& out, std::size_t slack);

}  // namespace stoker
