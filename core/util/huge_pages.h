// util/huge_pages: the loader's large host blocks on 2 MiB pages (Linux transparent huge pages).
// A float32 batch of 64 images of 224x224 is 38 MiB written once per batch by the workers: on 4 KiB
// pages that is about 9,400 pages, each a TLB miss (a two-level page walk inside a VM), and the
// train pipeline spent ~23 us per image on them on the 2-core VM. Debian's default THP mode is
// "madvise", so a block has to ask for huge pages (PyTorch's THP_MEM_ALLOC_ENABLE does the same
// for its CPU allocator).
#pragma once

#include <cstddef>

namespace stoker {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Whether large host blocks ask for huge pages: STOKER_HUGE_PAGES unset, empty or 1 yes, 0 no (for a
// kernel or workload where THP misbehaves, and to measure the difference); any other value is
// refused with BadInput naming the variable.
bool hugePagesWanted();

// madvise(MADV_HUGEPAGE) over [p, p + bytes), both multiples of kHugePageBytes, before the memory
// is first touched. False where the kernel refused (THP "never", or no THP); the memory then stays
// on ordinary pages, which is harmless.
bool adviseHugePages(void* p, std::size_t bytes);

}  // namespace stoker
