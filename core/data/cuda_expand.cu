// data/cuda_expand.cu: the byte-widening kernel (see cuda_expand.h), compiled by nvcc with the
// gather kernel (data/cuda_gather.cu) in every build that finds nvcc.
#include <cuda_runtime.h>

#include "data/cuda_expand.h"

namespace stoker {
namespace cuda_expand {
namespace {

template <class Index>
__device__ void expandAll(const Launch& a, const std::uint32_t* lut) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const auto total = static_cast<Index>(a.total);
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    expandElement<Index>(a, lut, i);
}

// The tables in shared memory: threads look up bytes at random, which the parameter bank would
// serialise across a warp.
__global__ void __launch_bounds__(kThreadsPerBlock) expandKernel(const __grid_constant__ Launch a) {
  __shared__ std::uint32_t lut[kExpandChannels * 256];
  for (int k = threadIdx.x; k < kExpandChannels * 256; k += blockDim.x) lut[k] = a.table[k];
  __syncthreads();
  if (a.total < (1ull << 32)) expandAll<std::uint32_t>(a, lut);
  else expandAll<std::uint64_t>(a, lut);
}

}  // namespace

int launch(const Launch& a, int blocks, void* stream) {
  expandKernel<<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda_expand
}  // namespace stoker
