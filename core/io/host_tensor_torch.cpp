#include "io/host_tensor_torch.h"
#include "io/safetensors_file.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cstring>

#include "util/error.h"

namespace stoker {
namespace {

// U16/U32/U64 arrived in libtorch 2.3, float8 in 2.1; Debian ships 1.13.
#define STOKER_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))


}  // namespace

std::optional<c10::ScalarType> torchType(Dtype d) {
  switch (d) {
    case Dtype::BOOL: return c10::ScalarType::Bool;
    case Dtype::U8: return c10::ScalarType::Byte;
    case Dtype::I8: return c10::ScalarType::Char;
    case Dtype::I16: return c10::ScalarType::Short;
    case Dtype::I32: return c10::ScalarType::Int;
    case Dtype::I64: return c10::ScalarType::Long;
    case Dtype::F16: return c10::ScalarType::Half;
    case Dtype::BF16: return c10::ScalarType::BFloat16;
    case Dtype::F32: return c10::ScalarType::Float;
    case Dtype::F64: return c10::ScalarType::Double;
    case Dtype::C64: return c10::ScalarType::ComplexFloat;
#if STOKER_TORCH_AT_LEAST(2, 1)
    case Dtype::F8_E4M3: return c10::ScalarType::Float8_e4m3fn;
    case Dtype::F8_E5M2: return c10::ScalarType::Float8_e5m2;
#endif
#if STOKER_TORCH_AT_LEAST(2, 3)
    case Dtype::U16: return c10::ScalarType::UInt16;
    case Dtype::U32: return c10::ScalarType::UInt32;
    case Dtype::U64: return c10::ScalarType::UInt64;
#endif
    default: return std::nullopt;
  }
}


bool torchSupports(Dtype d) { return torchType(d).has_value(); }

Dtype dtypeFromTorch(c10::ScalarType t) {
  for (int i = 0; i < kDtypeCount; ++i) {
    auto d = static_cast<Dtype>(i);
    if (torchType(d) == t) return d;
  }
  throwBadInput(std::string("dtype ") + c10::toString(t), "has no safetensors equivalent");
}

at::Tensor HostTensor::toTorch() const {
  auto st = torchType(dtype);
  if (!st)
    throwBadInput(std::string("dtype ") + std::string(dtypeName(dtype)),
                  "is not supported by libtorch " TORCH_VERSION
                  " (readable and copyable as bytes only)");
  auto options = at::TensorOptions().dtype(*st).device(at::kCPU);
  const std::size_t align = std::max<std::size_t>(1, dtypeBits(dtype) / 8);
  if (nbytes == 0) return at::empty(shape, options);
  if (reinterpret_cast<std::uintptr_t>(data) % align != 0) {
    // Files whose header is not padded (older writers) misalign the data;
    // one copy gives libtorch's kernels the alignment they assume.
    at::Tensor t = at::empty(shape, options);
    std::memcpy(t.data_ptr(), data, nbytes);
    return t;
  }
  auto keep = new std::shared_ptr<const void>(owner);
  return at::from_blob(const_cast<std::uint8_t*>(data), shape,
                       [keep](void*) { delete keep; }, options);
}

HostTensor hostTensorFromTorch(const at::Tensor& t) {
  if (!t.device().is_cpu() || !t.is_contiguous())
    throw Error(ErrorKind::Internal, "hostTensorFromTorch", "needs a contiguous CPU tensor");
  HostTensor h;
  h.dtype = dtypeFromTorch(t.scalar_type());
  h.shape.assign(t.sizes().begin(), t.sizes().end());
  h.data = static_cast<const std::uint8_t*>(t.data_ptr());
  h.nbytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
  h.owner = std::make_shared<at::Tensor>(t);
  return h;
}

at::Tensor SafetensorsFile::tensor(std::string_view name) const { return host(name).toTorch(); }

}  // namespace stoker
