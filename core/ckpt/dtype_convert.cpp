#include "io/host_tensor_torch.h"
#include "ckpt/dtype_convert.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "io/host_tensor.h"
#include "util/error.h"

namespace stoker {

void convertFloats(const void* in, Dtype from, Dtype to, std::size_t count, std::vector<std::uint8_t>& out,
                   F16Overflow* overflow) {
  auto fromType = torchType(from), toType = torchType(to);
  if (!fromType || !toType)
    throw Error(ErrorKind::Internal, "dtype conversion", "unsupported dtypes");
  out.resize(count * (dtypeBits(to) / 8));
  const auto n = static_cast<std::int64_t>(count);
  at::Tensor src = at::from_blob(const_cast<void*>(in), {n}, at::TensorOptions().dtype(*fromType));
  at::Tensor dst = at::from_blob(out.data(), {n}, at::TensorOptions().dtype(*toType));
  dst.copy_(src);  // the same kernel as tensor.to(dtype)
  if (overflow && to == Dtype::F16 && from != Dtype::F16) {
    at::Tensor magnitude = src.abs();
    at::Tensor over = magnitude.gt(65504.0).logical_and_(magnitude.isfinite());
    const std::int64_t c = over.sum().item<std::int64_t>();
    if (c > 0) {
      overflow->count += static_cast<std::uint64_t>(c);
      overflow->maxAbs = std::max(overflow->maxAbs, magnitude.masked_select(over).max().item<double>());
    }
  }
}

}  // namespace stoker
