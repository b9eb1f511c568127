// data/cuda_gather.cu: the row gather kernel (see cuda_gather.h). Compiled by nvcc for sm_80 and
// sm_90 (plus PTX for later GPUs) in every build that finds nvcc -- into the core against a CUDA
// libtorch, into the CUDA syntax check elsewhere -- so a machine without a GPU still compiles it.
#include <cuda_runtime.h>

#include "data/cuda_gather.h"

namespace stoker {
namespace cuda_gather {
namespace {

constexpr int kUnroll = 4;  // loads in flight per thread before its stores: reads over PCIe are far

template <class Index, class L>
__device__ void gatherFields(const L& a) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const Index first = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int f = 0; f < a.fieldCount; ++f) {
    const auto total = static_cast<Index>(elementsOf(a, f));
    const Field& fd = a.fields[f];
    if (fd.width == 16) {
      // The hot path, unrolled by hand: kUnroll 16-byte loads, then the stores.
      const auto perRow = static_cast<Index>(fd.rowBytes / 16);
      for (Index v = first; v < total; v += kUnroll * stride) {
        uint4 held[kUnroll];
        uint4* to[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const Index e = v + k * stride;
          to[k] = nullptr;
          if (e < total) {
            const Index r = e / perRow, c = e - r * perRow;
            held[k] = reinterpret_cast<const uint4*>(fd.src + a.idx[r] * fd.rowBytes)[c];
            to[k] = reinterpret_cast<uint4*>(fd.dst + static_cast<std::int64_t>(r) * fd.rowBytes) + c;
          }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (to[k]) *to[k] = held[k];
      }
    } else {
      for (Index v = first; v < total; v += stride) copyElement<Index>(a, f, v);
    }
  }
}

// __grid_constant__: the parameters are read in place (the indices are indexed at run time; without
// it each thread would copy the whole struct to local memory first).
template <class L>
__global__ void __launch_bounds__(kThreadsPerBlock) gatherKernel(const __grid_constant__ L a) {
  if (fits32(a)) gatherFields<std::uint32_t>(a);
  else gatherFields<std::uint64_t>(a);
}

template <class L>
int launchOf(const L& a, int blocks, void* stream) {
  gatherKernel<L><<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch(const SmallLaunch& a, int blocks, void* stream) { return launchOf(a, blocks, stream); }
int launch(const Launch& a, int blocks, void* stream) { return launchOf(a, blocks, stream); }

}  // namespace cuda_gather
}  // namespace stoker
