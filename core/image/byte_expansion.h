// image/byte_expansion: an image field that crosses to the device as bytes and is widened there
// (the loader's normalize_on knob). The worker stops after the resize: it writes each image as
// three u8 planes (CHW, as the resize leaves them), a quarter of the float32 bytes over PCIe. The
// device then maps every byte through its channel's 256-entry table into the field's dtype, NCHW
// or channels-last. The tables hold exactly what the CPU path writes (image/to_tensor: ToTensor +
// Normalize rounded in float32 as torchvision does; float16 / bfloat16 as their bits), so a batch
// widened on the device equals the CPU path's bit for bit, not only within float rounding.
//
// Plain C++ (no torch, no CUDA): the element mapping the CUDA kernel (data/cuda_expand.cu) runs is
// this header's, and the CPU tests run it.
#pragma once

#include <cstdint>
#include <vector>

#include "util/host_device.h"

namespace stoker {

constexpr int kExpandChannels = 3;

struct ByteExpansion {
  std::int64_t plane = 0;       // values per channel of one sample (H x W)
  std::int32_t valueBytes = 4;  // 4: float32; 2: float16 or bfloat16
  // kExpandChannels x 256 values: the bits of the field's dtype, valueBytes each, native byte order.
  std::vector<std::uint8_t> table;

  std::int64_t bytesPerSample() const { return kExpandChannels * plane; }  // what the dataset writes
  std::int64_t valuesBytesPerSample() const { return bytesPerSample() * valueBytes; }
};

// Where input byte i of a batch (sample-major, then channel, then pixel) lands among the output's
// values: the same place in NCHW, or pixel-major with the channels interleaved in NHWC.
template <class Index>
STOKER_HOST_DEVICE inline Index expandedIndex(Index i, Index plane, bool channelsLast) {
  if (!channelsLast) return i;
  const Index perSample = static_cast<Index>(kExpandChannels) * plane;
  const Index s = i / perSample;
  const Index rest = i - s * perSample;
  const Index c = rest / plane;
  const Index p = rest - c * plane;
  return s * perSample + p * static_cast<Index>(kExpandChannels) + c;
}

// The channel of input byte i.
template <class Index>
STOKER_HOST_DEVICE inline int channelOf(Index i, Index plane) {
  return static_cast<int>((i / plane) % static_cast<Index>(kExpandChannels));
}

// Widens `samples` samples of bytes at `in` into `out` (samples x bytesPerSample() values) on the
// host, element by element through expandedIndex: the CPU device's path, and the kernel's test.
void expandBytesOnHost(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast, void* out);

}  // namespace stoker
