// io/host_tensor_torch: where HostTensor meets libtorch -- HostTensor::toTorch(),
// the dtype mapping both ways, and a HostTensor over a libtorch tensor. Part of
// the libtorch half of the core (stoker_core), never of stoker_bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "io/host_tensor.h"

namespace stoker {

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
