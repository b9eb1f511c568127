// image/webp_image: WebP through libwebp, the library PIL's WebP plugin decodes with, whole and
// into RGB (alpha dropped, as PIL's convert("RGB") drops it); of an animation, the first frame
// composed on its canvas, as PIL's Image.open gives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "image/image_decoder.h"

namespace stoker {

// "RIFF" <size> "WEBP".
bool isWebp(const std::uint8_t* data, std::size_t size);

// The size from the header (an animation's canvas); throws Error(BadInput) naming `name` if it is
// not a WebP.
ImageSize webpSize(const std::uint8_t* data, std::size_t size, const std::string& name);

// Decodes the whole image (of `image`'s size) as RGB rows of image.width * 3 bytes into `out`,
// grown to hold them plus `slack` bytes; throws Error(BadInput) naming `name` (truncated, corrupt);
// an animation gives its first frame.
void decodeWebp(const std::uint8_t* data, std::size_t size, const std::string& name, ImageSize image,
                PixelBuffer& out, std::size_t slack);

}  // namespace stoker
