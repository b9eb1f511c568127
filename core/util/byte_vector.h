// util/byte_vector: a std::vector of bytes whose resize() leaves the new bytes uninitialised, for
// buffers that a network or file read fills right after. Zeroing them first costs a pass over the
// bytes and faults in every page, even pages the read never reaches (a shard's open sized its
// buffer to a part, 8 MiB, for shards of 2 MB).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace stoker {

template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;  // default-initialised: for bytes, left as they are
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using ByteVector = std::vector<std::uint8_t, DefaultInitAllocator<std::uint8_t>>;

}  // namespace stoker
