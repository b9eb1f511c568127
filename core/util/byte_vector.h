// util/byte_vector: a std::vector of bytes whose resize() leaves the new bytes uninitialised, for
// buffers that a network or file read fills right after. Zeroing them first costs a pass over the
// bytes and faults in every page, even pages the read never reaches (a shard's open sized its
// buffer to a part, 8 MiB, for shards of 2 MB). The decoders' buffers are these too
// (image/pixel_buffer).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace stoker {

template <class T>
struct UninitialisedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  UninitialisedAllocator() = default;
  template <class U>
  UninitialisedAllocator(const UninitialisedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-, not value-initialised: no write
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using ByteVector = std::vector<std::uint8_t, UninitialisedAllocator<std::uint8_t>>;

}  // namespace stoker
