// The batch-block pool's release fences, with fences whose completion the test controls (a CUDA
// event's stand-in): a block the device still uses is never handed out again, a pool full of
// such blocks waits for the oldest instead of growing, a fence maker bound at hand-over is called
// at release and wins over the producer's fence, a stream recorded beside it is waited for too, and blocks over the pool's size are freed only
// once their fence is done; pinned staging locked in place, exact size, unlocked last; large byte
// buffers (util/byte_vector) on huge pages where a reply fills them. The CUDA
// events and cudaHostRegister themselves are exercised by the GPU check.
#include <QtTest>

#include <ATen/ops/empty.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <stdexcept>

#include "data/buffer_pool.h"
#include "data/device.h"
#include "util/byte_vector.h"
#include "util/huge_pages.h"

using namespace stoker;

namespace {

struct TestFence : DeviceFence {
  mutable std::atomic<bool> finished{false};
  mutable std::atomic<int> waits{0};
  mutable std::atomic<int> queries{0};
  bool done() const override {
    ++queries;
    return finished.load();
  }
  void wait() const override {
    ++waits;
    finished = true;  // "the device got there"
  }
};

std::shared_ptr<BufferPool> pool(int keepFree) {
  return BufferPool::create([](std::int64_t n) { return at::empty({n}, at::kByte); }, 1024, keepFree);
}

}  // namespace

class TestBufferPool : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // A loader destroyed after an epoch stopped early frees its pools with blocks the device may still
  // fill or read; a batch the user keeps outlives its loader. Neither block is freed before its fence.
  void blocksAreFreedOnlyPastTheirFencesWhenThePoolGoes() {
    auto idleFence = std::make_shared<TestFence>();
    auto keptFence = std::make_shared<TestFence>();
    std::shared_ptr<BufferLease> kept;
    {
      auto p = pool(2);
      p->acquire()->fenceRelease(idleFence);  // back in the pool, still fenced
      kept = p->acquire();
      kept->fenceRelease(keptFence);
      QCOMPARE(p->allocations(), std::int64_t(2));
      QCOMPARE(idleFence->waits.load(), 0);
    }
    QCOMPARE(idleFence->waits.load(), 1);
    QCOMPARE(keptFence->waits.load(), 0);
    kept.reset();  // its pool is gone: the lease waits itself
    QCOMPARE(keptFence->waits.load(), 1);
  }

  void aBlockWithoutAFenceIsReusedAtOnce() {
    auto p = pool(2);
    std::uint8_t* first = p->acquire()->data();
    QCOMPARE(p->acquire()->data(), first);
    QCOMPARE(p->allocations(), std::int64_t(1));
  }

  void aBlockTheDeviceStillUsesIsNotHandedOut() {
    auto p = pool(2);
    auto fence = std::make_shared<TestFence>();
    std::uint8_t* busy;
    {
      auto lease = p->acquire();
      busy = lease->data();
      lease->fenceRelease(fence);
    }
    auto other = p->acquire();  // one idle block, still in use: a second is allocated
    QVERIFY(other->data() != busy);
    QCOMPARE(p->allocations(), std::int64_t(2));
    QCOMPARE(fence->waits.load(), 0);
    fence->finished = true;
    QCOMPARE(p->acquire()->data(), busy);  // done: reused, nothing allocated
    QCOMPARE(p->allocations(), std::int64_t(2));
    QCOMPARE(p->fenceWaits(), std::int64_t(0));
  }

  void aFullPoolWaitsForTheOldestBlockInsteadOfGrowing() {
    auto p = pool(2);
    auto older = std::make_shared<TestFence>(), newer = std::make_shared<TestFence>();
    std::uint8_t* oldest;
    {
      auto a = p->acquire(), b = p->acquire();
      oldest = a->data();
      a->fenceRelease(older);
      b->fenceRelease(newer);
      a.reset();  // returned first
    }
    auto lease = p->acquire();
    QCOMPARE(lease->data(), oldest);
    QCOMPARE(older->waits.load(), 1);
    QCOMPARE(newer->waits.load(), 0);
    QCOMPARE(p->allocations(), std::int64_t(2));
    QCOMPARE(p->fenceWaits(), std::int64_t(1));
  }

  // The device passes fences in the order they were recorded: an acquire asks the newest idle block
  // and then the oldest, never every one (a CUDA event query each, per batch, on the resident
  // path's hot loop), and takes the oldest that is done.
  void anAcquireAsksAtMostTwoFences() {
    auto p = pool(8);
    std::vector<std::shared_ptr<TestFence>> fences;
    std::vector<std::uint8_t*> blocks;
    {
      std::vector<std::shared_ptr<BufferLease>> leases;
      for (int i = 0; i < 6; ++i) leases.push_back(p->acquire());
      for (auto& l : leases) {
        fences.push_back(std::make_shared<TestFence>());
        blocks.push_back(l->data());
        l->fenceRelease(fences.back());
        l.reset();  // returned in this order, oldest first
      }
    }
    for (int i = 0; i < 3; ++i) fences[static_cast<std::size_t>(i)]->finished = true;
    auto queries = [&] {
      int n = 0;
      for (auto& f : fences) n += f->queries.exchange(0);
      return n;
    };
    for (int i = 0; i < 3; ++i) {
      auto lease = p->acquire();
      QCOMPARE(lease->data(), blocks[static_cast<std::size_t>(i)]);  // the oldest done one
      QVERIFY2(queries() <= 2, "an acquire asked more than two fences");
      fences.push_back(std::make_shared<TestFence>());
      lease->fenceRelease(fences.back());  // back as the newest, busy
    }
    // None done now: the pool allocates (it is not full) after two queries.
    auto fresh = p->acquire();
    QCOMPARE(queries(), 2);
    QCOMPARE(p->allocations(), std::int64_t(7));
    QCOMPARE(p->fenceWaits(), std::int64_t(0));
  }

  void theConsumersFenceIsMadeAtReleaseAndWins() {
    auto p = pool(1);
    auto producer = std::make_shared<TestFence>();
    auto consumer = std::make_shared<TestFence>();
    int made = 0;
    auto lease = p->acquire();
    std::uint8_t* block = lease->data();
    lease->fenceRelease(producer);
    lease->fenceRelease(FenceMaker{});  // an empty maker (host devices) changes nothing
    lease->fenceRelease([&]() -> std::shared_ptr<DeviceFence> {
      ++made;
      return consumer;
    });
    QCOMPARE(made, 0);  // not at hand-over: the consumer queues its work after it
    lease.reset();
    QCOMPARE(made, 1);
    producer->finished = true;  // the copy is done, the consumer's kernels are not
    auto next = p->acquire();
    QCOMPARE(consumer->waits.load(), 1);  // the pool is full of it: waited for, then reused
    QCOMPARE(next->data(), block);
  }

  // Batch::recordStream: a block read on a second stream is reused only once that stream, and the
  // consumer's, got past it; either alone is not enough.
  void everyStreamRecordedIsWaitedFor() {
    auto p = pool(2);
    auto consumer = std::make_shared<TestFence>(), side = std::make_shared<TestFence>();
    auto lease = p->acquire();
    std::uint8_t* block = lease->data();
    lease->fenceRelease([&]() -> std::shared_ptr<DeviceFence> { return consumer; });
    lease->alsoFenceRelease(FenceMaker{});  // a host device's stream: nothing to wait for
    lease->alsoFenceRelease([&]() -> std::shared_ptr<DeviceFence> { return side; });
    lease.reset();
    consumer->finished = true;
    auto other = p->acquire();  // the side stream still reads the block: a new one
    QVERIFY(other->data() != block);
    other.reset();
    side->finished = true;
    auto third = p->acquire();
    auto fourth = p->acquire();
    QVERIFY(third->data() == block || fourth->data() == block);  // past both: reused
    QCOMPARE(p->allocations(), std::int64_t(2));
    QCOMPARE(consumer->waits.load() + side->waits.load(), 0);
  }

  // A fence that cannot be made (a broken device context) must not throw from the lease's
  // destructor: the block is dropped, never handed out again, and no longer counted as leased.
  void aLeaseWhoseFenceCannotBeMadeDropsItsBlock() {
    auto p = pool(2);
    auto lease = p->acquire();
    lease->fenceRelease([]() -> std::shared_ptr<DeviceFence> { throw std::runtime_error("device lost"); });
    QCOMPARE(p->allocatedBytes(), std::int64_t(1024));
    lease.reset();
    QCOMPARE(p->allocatedBytes(), std::int64_t(0));
    QCOMPARE(p->reservedBytes(), std::int64_t(0));
    auto next = p->acquire();
    QCOMPARE(p->allocations(), std::int64_t(2));  // a fresh block, not the dropped one from the pool
    QCOMPARE(p->allocatedBytes(), std::int64_t(1024));
  }

  void blocksOverThePoolSizeAreFreedOnlyOnceDone() {
    auto p = pool(1);
    auto fence = std::make_shared<TestFence>();
    {
      auto a = p->acquire(), b = p->acquire();
      b->fenceRelease(fence);
      a.reset();  // fills the one idle place
    }               // b: over the size and in use, so it retires instead of being freed
    QCOMPARE(p->reservedBytes(), std::int64_t(2 * 1024));
    QCOMPARE(p->allocatedBytes(), std::int64_t(0));
    fence->finished = true;
    p->acquire();  // any later acquire or release frees what is done
    QCOMPARE(p->reservedBytes(), std::int64_t(1024));
  }

  // Pinned staging locked in place (CUDA: cudaHostRegister on the block itself) instead of PyTorch's
  // caching host allocator: the exact size on 2 MiB pages, unlocked before its memory goes; where
  // the lock is refused or the block is small, nothing (the caller takes the allocator) -- and
  // pinned_bytes counts the allocator's power-of-two blocks as it holds them.
  void pinnedStagingIsLockedInPlace() {
    if (!stoker::hugePagesWanted()) QSKIP("STOKER_HUGE_PAGES=0: blocks are not on 2 MiB pages");
    std::vector<std::pair<void*, std::size_t>> pinned;
    std::vector<void*> unpinned;
    auto pin = [&](void* p, std::size_t n) {
      pinned.emplace_back(p, n);
      return true;
    };
    auto unpin = [&](void* p) { unpinned.push_back(p); };
    const std::int64_t bytes = 64 * 3 * 224 * 224 * 4;  // a float32 image batch: 36.8 MiB
    {
      at::Tensor block = stoker::pinnedHostBytesInPlace(bytes, pin, unpin);
      QVERIFY(block.defined());
      QCOMPARE(block.numel(), bytes);
      QCOMPARE(pinned.size(), std::size_t{1});
      QCOMPARE(pinned[0].first, block.data_ptr());
      QCOMPARE(pinned[0].second, static_cast<std::size_t>(bytes));  // not rounded up
      QCOMPARE(reinterpret_cast<std::uintptr_t>(block.data_ptr()) % stoker::kHugePageBytes, std::uintptr_t{0});
      std::memset(block.data_ptr(), 7, static_cast<std::size_t>(bytes));  // all of it is the block's
      QVERIFY(unpinned.empty());
    }
    QCOMPARE(unpinned, std::vector<void*>{pinned[0].first});  // unlocked when the last reference went
    QVERIFY(!stoker::pinnedHostBytesInPlace(bytes, [](void*, std::size_t) { return false; }, unpin).defined());
    QCOMPARE(unpinned.size(), std::size_t{1});  // refused: nothing to undo
    QVERIFY(!stoker::pinnedHostBytesInPlace(1 << 20, pin, unpin).defined());  // 1 MiB: the allocator's
    QCOMPARE(pinned.size(), std::size_t{1});                                    // not even tried
    QCOMPARE(stoker::cachingHostAllocatorBytes(bytes), std::int64_t{64} << 20);
    QCOMPARE(stoker::cachingHostAllocatorBytes(1 << 20), std::int64_t{1} << 20);
    QCOMPARE(stoker::cachingHostAllocatorBytes((1 << 20) + 1), std::int64_t{2} << 20);
  }

  // A ByteVector of 2 MiB or more (a remote shard's blocks) is its own mapping from a 2 MiB
  // boundary, on 4 KiB pages until told how much of it will be filled: then the whole 2 MiB pages
  // of that are advised for THP, and not the rest (the head of a 2.2 MB shard, received into 8 MiB,
  // must not hold 4 MiB); growing one keeps its bytes; small ones come from operator new as before.
  void largeByteVectorsStartOnHugePages() {
    ByteVector grown;
    for (std::size_t i = 0; i < (5u << 20) + 12345; ++i) grown.push_back(static_cast<std::uint8_t>(i * 7));  // reallocates past 2 MiB
    for (std::size_t i = 0; i < grown.size(); i += 4093) QCOMPARE(grown[i], static_cast<std::uint8_t>(i * 7));
    ByteVector small(1 << 20);
    std::memset(small.data(), 1, small.size());
    ByteVector big;
    big.resize((5u << 20) + 12345);
    std::memset(big.data(), 3, big.size());  // every byte is the buffer's
    if (!largeBuffersOnHugePages()) QSKIP("AddressSanitizer or STOKER_HUGE_PAGES=0: large buffers come from operator new");
    const auto at = reinterpret_cast<std::uintptr_t>(big.data());
    QCOMPARE(at % kHugePageBytes, std::uintptr_t{0});
    std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(mode, modes);
    // Under "always" every anonymous mapping is eligible, under "never" none: only "madvise" (Debian's
    // default) shows what was advised.
    if (modes.find("[madvise]") == std::string::npos) QSKIP("transparent huge pages are not in madvise mode here");
    // THPeligible of the mapping holding an address (the kernel's smaps; a neighbour with the same
    // flags may have merged with it, which keeps the flag).
    auto eligible = [](std::uintptr_t address) {
      std::ifstream smaps("/proc/self/smaps");
      std::string line;
      bool inside = false;
      while (std::getline(smaps, line)) {
        std::uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (line.find(':') == std::string::npos || line.find('-') < line.find(' ')) {
          if (head >> std::hex >> lo >> dash >> hi && dash == '-') inside = lo <= address && address < hi;
          continue;
        }
        if (inside && line.rfind("THPeligible:", 0) == 0) return line.find('1') != std::string::npos ? 1 : 0;
      }
      return -1;
    };
    QCOMPARE(eligible(at), 0);  // nothing said yet
    ByteVector head;
    head.resize(8u << 20);  // a whole part, for a shard of 5 MiB and a bit
    const auto headAt = reinterpret_cast<std::uintptr_t>(head.data());
    adviseFilledHugePages(head.data(), (5u << 20) + 12345);
    QCOMPARE(eligible(headAt), 1);
    QCOMPARE(eligible(headAt + (4u << 20) - 1), 1);
    QCOMPARE(eligible(headAt + (4u << 20)), 0);  // the filled tail past the last whole huge page
    QCOMPARE(eligible(headAt + head.size() - 1), 0);  // and what the reply does not reach
    adviseFilledHugePages(small.data(), small.size());  // not a mapping of its own: left alone
  }
};

QTEST_APPLESS_MAIN(TestBufferPool)
#include "tst_buffer_pool.moc"
