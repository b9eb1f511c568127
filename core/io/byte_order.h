// io/byte_order: big/little-endian helpers shared by the IDX, .npy, zip and safetensors readers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace stoker {

template <typename T>
T loadBigEndian(const std::uint8_t* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>((v << 8) | p[i]);
  return v;
}

template <typename T>
T loadLittleEndian(const std::uint8_t* p) {
  T v = 0;
  for (std::size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | p[i]);
  return v;
}

// Reverses each `elementBytes`-wide element in place when the source byte
// order differs from this (little-endian) machine's.
inline void swapToNative(std::uint8_t* data, std::size_t nbytes, std::size_t elementBytes,
                         bool sourceBigEndian) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Stoker assumes a little-endian host");
  if (!sourceBigEndian || elementBytes <= 1) return;
  for (std::size_t i = 0; i + elementBytes <= nbytes; i += elementBytes)
    std::reverse(data + i, data + i + elementBytes);
}

}  // namespace stoker
