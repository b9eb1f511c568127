// util/host_device: STOKER_HOST_DEVICE marks a function that CUDA kernels call and the CPU tests run
// too (__host__ __device__ under nvcc, nothing elsewhere).
#pragma once

#if defined(__CUDACC__)
#define STOKER_HOST_DEVICE __host__ __device__
#else
#define STOKER_HOST_DEVICE
#endif
