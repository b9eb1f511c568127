// image/bmp_image: BMP through stb_image, the copy Debian's libstb-dev ships, compiled here with
// its BMP decoder only (its PPM/PGM reader failed fuzzing within seconds: a heap overflow on 16-bit
// files and a signed overflow in header numbers; tests/fuzz/regressions/image_decode). Whole
// images into RGB (alpha dropped). What stb_image does not decode (RLE BMPs) is refused with its
// reason, and a file cut short as truncated, naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "image/image_decoder.h"

namespace stoker {

bool isBmp(const std::uint8_t* data, std::size_t size);  // "BM"

// The size from the header; throws Error(BadInput) naming `name`.
ImageSize bmpSize(const std::uint8_t* data, std::size_t size, const std::string& name);

// Decodes the whole image as RGB rows of image.width * 3 bytes into `out`, grown to hold them plus
// `slack` bytes; throws Error(BadInput) naming `name`.
void decodeBmp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
              PixelBuffer& out, std::size_t slack);

}  // namespace stoker
