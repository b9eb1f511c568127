// io/host_tensor: a tensor's bytes in host memory as readers hand it out:
// dtype, shape and a pointer into memory that `owner` keeps alive (an mmap, a
// decoded buffer). Every dtype is representable here, including the ones the
// linked libtorch lacks; toTorch() is the single place that meets libtorch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/dtype.h"

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
  at::Tensor toTorch() const;
};

// The libtorch scalar type of `d`, if the linked libtorch has one.
std::optional<c10::ScalarType> torchType(Dtype d);
// Whether the linked libtorch has a scalar type for `d`.
bool torchSupports(Dtype d);
// The Stoker dtype of a libtorch scalar type; throws for ones with no
// safetensors name (e.g. quantized types).
Dtype dtypeFromTorch(c10::ScalarType t);
// A HostTensor viewing a contiguous CPU libtorch tensor (kept alive by owner).
HostTensor hostTensorFromTorch(const at::Tensor& t);

}  // namespace stoker
