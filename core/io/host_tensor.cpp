#include "io/host_tensor.h"

namespace stoker {

std::uint64_t HostTensor::elementCount() const {
  std::uint64_t n = 1;
  for (auto s : shape) n *= static_cast<std::uint64_t>(s);
  return n;
}

}  // namespace stoker
