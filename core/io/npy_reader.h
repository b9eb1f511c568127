// io/npy_reader: NumPy .npy files (format 1.0, 2.0, 3.0): C or Fortran order,
// little or big endian, bool/int/uint/float/complex64 dtypes. Little-endian
// C-order data is served straight from the mapping; anything else is decoded
// once into C order.
#pragma once

#include <string>

#include "io/host_tensor.h"

namespace stoker {

struct PartOptions;

// A URL is fetched whole, in `parts` (through their cache when they have one).
HostTensor readNpy(const std::string& path, const PartOptions* parts = nullptr);

}  // namespace stoker
