// util/byte_vector: a std::vector of bytes whose resize() leaves the new bytes uninitialised, for
// buffers that a network or file read fills right after. Zeroing them first costs a pass over the
// bytes and faults in every page, even pages the read never reaches (a shard's open sized its
// buffer to a part, 8 MiB, for shards of 2 MB). The decoders' buffers are these too
// (image/pixel_buffer).
//
// Buffers of 2 MiB or more are mapped on their own from a 2 MiB boundary, so that the network can
// fill them on transparent huge pages (util/huge_pages; STOKER_HUGE_PAGES=0 turns it off): an open
// that received 43 MB of remote shards into fresh 4 KiB pages took ~11,000 page faults more than
// the local open, each leaving the guest on the 2-core VM. Only what a reply is known to fill is
// advised (adviseFilledHugePages, when its length is known): a shard's head is received into a
// buffer of a whole part (8 MiB) and a 2.2 MB shard would otherwise hold 4 MiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace stoker {

// ::operator new below 2 MiB (or with huge pages turned off), a mapping of whole 2 MiB pages above;
// freeBytes must be given the size allocateBytes was.
void* allocateBytes(std::size_t bytes);
void freeBytes(void* p, std::size_t bytes) noexcept;
// Whether allocateBytes maps buffers of 2 MiB or more on huge pages in this process (not under
// AddressSanitizer, whose redzones need operator new, nor with STOKER_HUGE_PAGES=0).
bool largeBuffersOnHugePages();
// Advises the whole 2 MiB pages of [p, p + bytes) onto huge pages before they are written, where p
// is 2 MiB-aligned, as the start of a buffer allocateBytes mapped is (other memory seldom is, and
// advising it would be harmless); elsewhere, and below 2 MiB, nothing.
void adviseFilledHugePages(void* p, std::size_t bytes);

template <class T>
struct UninitialisedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  UninitialisedAllocator() = default;
  template <class U>
  UninitialisedAllocator(const UninitialisedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocateBytes(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { freeBytes(p, n * sizeof(T)); }
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
