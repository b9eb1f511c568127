// data/cuda_gather: the CUDA path's row gather as one kernel launch for all fields of a batch
// (cuda_gather.cu, compiled by nvcc). out[f][r] = field[f][idx[r]] for every field f.
//
// Why a kernel of our own rather than at::index_select per field: a torch op per field costs a
// pinned allocation and an upload for the indices, a from_blob with a pointer query and the op's
// own dispatch -- 50-90 us of host work per batch against 11-15 us of GPU work on an H100. Here the
// indices travel inside the launch's parameters (kernel parameters of up to 32 KiB on sm_70+ since
// CUDA 12.1): no allocation, no upload, no pointer query, one launch per batch of up to kMaxRows.
//
// The same kernel reads a dataset held in host memory that is registered with CUDA (mapped,
// read-only): the SMs pull the rows over PCIe straight into the batch, with no CPU pass over the
// bytes and no staging copy (streaming of in-memory datasets).
//
// This header is plain C++ (no CUDA, no torch): the planning and the per-element copy the kernel
// runs are tested on the CPU (tst_multi_device), where no GPU can run the kernel itself.
#pragma once

#include <cstdint>
#include <cstring>

#include "util/host_device.h"

namespace stoker {
namespace cuda_gather {

constexpr int kMaxFields = 4;
constexpr int kThreadsPerBlock = 256;
// Indices per launch. The parameters are copied whole by every launch, so small batches take the
// small launch (2 KiB of indices) and large ones the large (16 KiB; the limit is 32 KiB).
constexpr int kSmallRows = 256;
constexpr int kMaxRows = 2048;

struct Field {
  const unsigned char* src = nullptr;  // row 0 of the field (device memory or mapped host memory)
  unsigned char* dst = nullptr;        // row 0 of the batch's field
  std::int64_t rowBytes = 0;
  std::int32_t width = 1;  // bytes moved per element: 16, 8, 4, 2 or 1 (the alignment all three allow)
};

// One launch: up to kMaxFields fields and Rows rows of the batch (rows [0, rows) of the launch are
// the batch's rows [firstRow, firstRow + rows); dst already points at firstRow).
template <int Rows>
struct LaunchOf {
  static constexpr int kRows = Rows;
  Field fields[kMaxFields];
  std::int32_t fieldCount = 0;
  std::int32_t rows = 0;
  std::int64_t idx[Rows];
};
using SmallLaunch = LaunchOf<kSmallRows>;
using Launch = LaunchOf<kMaxRows>;

// The widest element that keeps every row of src and dst aligned.
inline std::int32_t elementWidth(const void* src, const void* dst, std::int64_t rowBytes) {
  const auto s = reinterpret_cast<std::uintptr_t>(src), d = reinterpret_cast<std::uintptr_t>(dst);
  for (std::int32_t w : {16, 8, 4, 2})
    if (s % w == 0 && d % w == 0 && rowBytes % w == 0) return w;
  return 1;
}

// Elements of field f in the launch.
template <class L>
STOKER_HOST_DEVICE inline std::uint64_t elementsOf(const L& a, int f) {
  return static_cast<std::uint64_t>(a.rows) * static_cast<std::uint64_t>(a.fields[f].rowBytes / a.fields[f].width);
}

// Copies element v (row-major over the launch's rows) of field f: what each GPU thread does. The
// index type is 32 bits wherever the launch's elements fit (a 64-bit division costs the GPU ~4x).
template <class Index, class L>
STOKER_HOST_DEVICE inline void copyElement(const L& a, int f, Index v) {
  const Field& fd = a.fields[f];
  const auto perRow = static_cast<Index>(fd.rowBytes / fd.width);
  const Index r = v / perRow;
  const Index c = v - r * perRow;
  const unsigned char* s = fd.src + a.idx[r] * fd.rowBytes + static_cast<std::int64_t>(c) * fd.width;
  unsigned char* d = fd.dst + static_cast<std::int64_t>(r) * fd.rowBytes + static_cast<std::int64_t>(c) * fd.width;
#if defined(__CUDA_ARCH__)
  switch (fd.width) {
    case 16: *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s); break;
    case 8: *reinterpret_cast<uint2*>(d) = *reinterpret_cast<const uint2*>(s); break;
    case 4: *reinterpret_cast<unsigned*>(d) = *reinterpret_cast<const unsigned*>(s); break;
    case 2: *reinterpret_cast<unsigned short*>(d) = *reinterpret_cast<const unsigned short*>(s); break;
    default: *d = *s;
  }
#else
  std::memcpy(d, s, static_cast<std::size_t>(fd.width));
#endif
}

// Whether every field's elements in the launch fit 32-bit indexing.
template <class L>
STOKER_HOST_DEVICE inline bool fits32(const L& a) {
  for (int f = 0; f < a.fieldCount; ++f)
    if (elementsOf(a, f) >= (1ull << 32)) return false;
  return true;
}

// Every element of the launch on the host, in the kernel's own indexing: the CPU's test of it.
template <class L>
inline void runOnHost(const L& a) {
  const bool narrow = fits32(a);
  for (int f = 0; f < a.fieldCount; ++f)
    for (std::uint64_t v = 0; v < elementsOf(a, f); ++v) {
      if (narrow) copyElement<std::uint32_t>(a, f, static_cast<std::uint32_t>(v));
      else copyElement<std::uint64_t>(a, f, v);
    }
}

// Thread blocks for a launch: enough for every element once, at most `blocksCap` (a few per SM;
// the kernel strides over the rest).
template <class L>
inline int blocksFor(const L& a, int threadsPerBlock, int blocksCap) {
  std::uint64_t most = 0;
  for (int f = 0; f < a.fieldCount; ++f) most = elementsOf(a, f) > most ? elementsOf(a, f) : most;
  const std::uint64_t need = (most + static_cast<std::uint64_t>(threadsPerBlock) - 1) / static_cast<std::uint64_t>(threadsPerBlock);
  return static_cast<int>(need < 1 ? 1 : (need > static_cast<std::uint64_t>(blocksCap) ? blocksCap : need));
}

// Queues the launch on `stream` (a cudaStream_t); returns the cudaError_t of the launch (0: queued).
// Defined in cuda_gather.cu; only builds with that object call it.
int launch(const SmallLaunch& a, int blocks, void* stream);
int launch(const Launch& a, int blocks, void* stream);

}  // namespace cuda_gather
}  // namespace stoker
