// io/host_tensor: a tensor's bytes in host memory as readers hand it out:
// dtype, shape and a pointer into memory that `owner` keeps alive (an mmap, a
// decoded buffer). Every dtype is representable here, including the ones the
// linked libtorch lacks. Torch-free: toTorch() and the dtype mapping live in
// io/host_tensor_torch (the libtorch half of the core), the one place that
// meets libtorch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace at {
class Tensor;
}

namespace stoker {

struct HostTensor {
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;  // C-contiguous, little-endian
  std::uint64_t nbytes = 0;
  std::shared_ptr<const void> owner;   // keeps `data` valid

  std::uint64_t elementCount() const;

  // A libtorch tensor over the same bytes without copying when the pointer is
  // aligned for the dtype (one copy otherwise); the tensor's deleter keeps
  // `owner` alive. Throws Error(BadInput) for dtypes this libtorch lacks.
  // Defined in io/host_tensor_torch.cpp: callers include io/host_tensor_torch.h.
  at::Tensor toTorch() const;
};

}  // namespace stoker
