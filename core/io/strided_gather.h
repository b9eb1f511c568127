// io/strided_gather: a strided view of a storage copied out in row-major order
// (a transposed parameter torch.save kept as it was, a slice sharing a storage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace stoker {

// Whether a view of `size` with `stride` (elements) is row-major (dims of size 1 may carry any stride).
inline bool isRowMajor(const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride) {
  std::int64_t expect = 1;
  for (std::size_t k = size.size(); k-- > 0;) {
    if (size[k] != 1 && stride[k] != expect) return false;
    expect *= size[k];
  }
  return true;
}

// Copies the view (element `offset`, `size`, `stride`) of `storage` into `out`, row-major. The
// caller has checked the view lies inside the storage.
inline void gatherStrided(const std::uint8_t* storage, std::size_t elemBytes, std::int64_t offset,
                          const std::vector<std::int64_t>& size, const std::vector<std::int64_t>& stride,
                          std::uint8_t* out) {
  std::uint64_t count = 1;
  for (auto d : size) count *= static_cast<std::uint64_t>(d);
  std::vector<std::int64_t> index(size.size(), 0);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::int64_t at = offset;
    for (std::size_t d = 0; d < index.size(); ++d) at += index[d] * stride[d];
    std::memcpy(out + i * elemBytes, storage + static_cast<std::size_t>(at) * elemBytes, elemBytes);
    for (std::size_t d = index.size(); d-- > 0;) {  // odometer over the view's shape
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace stoker
