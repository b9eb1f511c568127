// data/cuda_gather.cu: the row gather kernel (see cuda_gather.h). Compiled by nvcc for sm_80 and
// sm_90 (plus PTX for later GPUs) in every build that finds nvcc -- into the core against a CUDA
// libtorch, into the CUDA syntax check elsewhere -- so a machine without a GPU still compiles it.
#include <cuda_runtime.h>

#include "data/cuda_gather.h"

namespace stoker {
namespace cuda_gather {
namespace {

constexpr int kUnroll = 4;  // loads in flight per thread before its stores: reads over PCIe are far

// __grid_constant__: the parameters are read in place (the indices are indexed at run time; without
// it each thread would copy the whole 8 KiB struct to local memory first).
__global__ void __launch_bounds__(256) gatherKernel(const __grid_constant__ Launch a) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int f = 0; f < a.fieldCount; ++f) {
    const std::uint64_t total = elementsOf(a, f);
    const Field& fd = a.fields[f];
    if (fd.width == 16) {
      // The hot path, unrolled by hand: kUnroll 16-byte loads, then the stores.
      const auto perRow = static_cast<std::uint64_t>(fd.rowBytes / 16);
      for (std::uint64_t v = first; v < total; v += kUnroll * stride) {
        uint4 held[kUnroll];
        uint4* to[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const std::uint64_t e = v + k * stride;
          to[k] = nullptr;
          if (e < total) {
            const std::uint64_t r = e / perRow, c = e - r * perRow;
            held[k] = reinterpret_cast<const uint4*>(fd.src + a.idx[r] * fd.rowBytes)[c];
            to[k] = reinterpret_cast<uint4*>(fd.dst + static_cast<std::int64_t>(r) * fd.rowBytes) + c;
          }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (to[k]) *to[k] = held[k];
      }
    } else {
      for (std::uint64_t v = first; v < total; v += stride) copyElement(a, f, v);
    }
  }
}

}  // namespace

int launch(const Launch& a, int blocks, void* stream) {
  gatherKernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda_gather
}  // namespace stoker
