// ckpt/dtype_convert: floating-point conversion of tensor bytes between F64,
// F32, F16 and BF16, done by libtorch's own copy kernel so the rounding is
// exactly torch's (round-to-nearest-even), with a count of values that do
// not fit in F16 (|x| > 65504) so they can be reported instead of silently
// becoming inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/dtype.h"

namespace stoker {

struct F16Overflow {
  std::uint64_t count = 0;  // finite values with |x| > 65504
  double maxAbs = 0;
};

// Converts `count` values at `in` (dtype `from`) into `out` (resized to the
// output bytes). Adds to `overflow` when converting to F16.
void convertFloats(const void* in, Dtype from, Dtype to, std::size_t count, std::vector<std::uint8_t>& out,
                   F16Overflow* overflow);

}  // namespace stoker
