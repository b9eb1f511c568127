// image/pixel_buffer: the decoders' growable output buffers, kept by a worker thread between images.
// Growing one leaves the new bytes uninitialised -- every decoder writes each byte it returns, or
// throws -- so a 69-byte PNG whose header claims 12000x12000 pixels costs address space, not
// memory, until its data is really there (a zero-filled std::vector touched 430 MB before libspng
// found the data missing). A buffer grown past kKeptBufferBytes for one large image is given back
// before the next image instead of staying with its worker for good.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/byte_vector.h"

namespace stoker {

using PixelBuffer = ByteVector;

inline constexpr std::size_t kKeptBufferBytes = std::size_t(64) << 20;

template <class Buffer>
void releaseIfHuge(Buffer& buffer) {
  if (buffer.capacity() * sizeof(typename Buffer::value_type) > kKeptBufferBytes) Buffer().swap(buffer);
}

}  // namespace stoker
