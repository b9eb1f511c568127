// data/cuda_expand: the CUDA side of normalize_on device (image/byte_expansion): one kernel widens
// a batch's image bytes through their channel's table into float32 / float16 / bfloat16, NCHW or
// channels-last, on the stream that copied the bytes. The tables travel in the launch's parameters
// (3 KiB) and each thread block loads them into shared memory once.
//
// Plain C++ like cuda_gather.h: the launch's packing and the element loop the kernel runs are
// tested on the CPU (tst_image_datasets expandKernelIndexingOnTheHost).
#pragma once

#include <cstdint>
#include <cstring>

#include "image/byte_expansion.h"

namespace stoker {
namespace cuda_expand {

constexpr int kThreadsPerBlock = 256;

struct Launch {
  const unsigned char* in = nullptr;  // samples x kExpandChannels x plane bytes, on the device
  void* out = nullptr;                // as many values, valueBytes each, on the device
  std::uint64_t total = 0;            // bytes in
  std::uint64_t plane = 0;
  std::int32_t valueBytes = 4;
  std::int32_t channelsLast = 0;
  std::uint32_t table[kExpandChannels * 256] = {};  // each value in 32 bits (2-byte values in the low half)
};

inline Launch launchFor(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast, void* out) {
  Launch a;
  a.in = in;
  a.out = out;
  a.total = static_cast<std::uint64_t>(samples) * static_cast<std::uint64_t>(e.bytesPerSample());
  a.plane = static_cast<std::uint64_t>(e.plane);
  a.valueBytes = e.valueBytes;
  a.channelsLast = channelsLast ? 1 : 0;
  for (int k = 0; k < kExpandChannels * 256; ++k) {
    if (e.valueBytes == 4) {
      std::memcpy(&a.table[k], e.table.data() + 4 * k, 4);
    } else {
      std::uint16_t v;
      std::memcpy(&v, e.table.data() + 2 * k, 2);
      a.table[k] = v;
    }
  }
  return a;
}

// Byte i of the launch, as each GPU thread widens it (`lut` is the block's copy of a.table).
template <class Index>
STOKER_HOST_DEVICE inline void expandElement(const Launch& a, const std::uint32_t* lut, Index i) {
  const Index plane = static_cast<Index>(a.plane);
  const std::uint32_t v = lut[channelOf(i, plane) * 256 + a.in[i]];
  const Index o = expandedIndex(i, plane, a.channelsLast != 0);
  if (a.valueBytes == 4) static_cast<std::uint32_t*>(a.out)[o] = v;
  else static_cast<std::uint16_t*>(a.out)[o] = static_cast<std::uint16_t>(v);
}

// Every byte of the launch on the host, in the kernel's indexing: the CPU's test of it.
inline void runOnHost(const Launch& a) {
  for (std::uint64_t i = 0; i < a.total; ++i) {
    if (a.total < (1ull << 32)) expandElement<std::uint32_t>(a, a.table, static_cast<std::uint32_t>(i));
    else expandElement<std::uint64_t>(a, a.table, i);
  }
}

inline int blocksFor(const Launch& a, int blocksCap) {
  const std::uint64_t need = (a.total + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(need < 1 ? 1 : (need > static_cast<std::uint64_t>(blocksCap) ? blocksCap : need));
}

// Queues the launch on `stream` (a cudaStream_t); returns the cudaError_t of the launch (0: queued).
// Defined in cuda_expand.cu; only builds with that object call it.
int launch(const Launch& a, int blocks, void* stream);

}  // namespace cuda_expand
}  // namespace stoker
