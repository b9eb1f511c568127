// data/cuda_device: the CUDA DeviceBackend, compiled only against a CUDA
// libtorch (STOKER_WITH_CUDA; elsewhere the CUDA syntax check compiles it).
// Memory figures come from cudaMemGetInfo and the caching allocator's
// statistics. Each producing thread copies and gathers on a stream of its
// own from libtorch's pool and never waits for it: an event recorded after
// the batch's work is the batch's fence. At hand-over the consumer's
// current stream waits on that event (cudaStreamWaitEvent, the CPU goes
// on); when the batch's block is released, an event recorded on the
// consumer's stream fences its reuse, so no worker overwrites a block that
// kernels queued by the consumer still read.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "data/cuda_expand.h"
#include "data/cuda_gather.h"
#include "data/device.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {
namespace {

// libtorch sets CUDA up lazily, the caching allocator with it (2.x: on the first CUDA tensor), and
// until then the allocator's statistics refuse every device ("Invalid device argument"): a loader
// in auto mode asks for the memory figures before anything was allocated.
void initCudaOnce() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
  at::globalContext().lazyInitDevice(at::kCUDA);
#else
  at::globalContext().lazyInitCUDA();
#endif
}

// Events outlive the fences that record them: a fence takes one from its device's pool and gives it
// back when it goes, so a batch costs no cudaEventCreate/Destroy (two a batch before: one per
// worker fence, one per release fence). Reuse is safe: a stream that waits on an event waits for
// the record it saw when it was told to, and only the fence that owns an event queries it.
class EventPool {
 public:
  static cudaEvent_t take(c10::DeviceIndex device) {
    EventPool& p = instance();
    {
      std::lock_guard<std::mutex> lock(p.mutex_);
      if (static_cast<std::size_t>(device) < p.free_.size() && !p.free_[device].empty()) {
        cudaEvent_t e = p.free_[device].back();
        p.free_[device].pop_back();
        return e;
      }
    }
    c10::cuda::CUDAGuard guard(device);
    cudaEvent_t e = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  static void give(c10::DeviceIndex device, cudaEvent_t e) {
    EventPool& p = instance();
    std::lock_guard<std::mutex> lock(p.mutex_);
    if (p.free_.size() <= static_cast<std::size_t>(device)) p.free_.resize(static_cast<std::size_t>(device) + 1);
    p.free_[device].push_back(e);
  }

 private:
  static EventPool& instance() {
    static EventPool* pool = new EventPool;  // never destroyed: fences may go after statics
    return *pool;
  }
  std::mutex mutex_;
  std::vector<std::vector<cudaEvent_t>> free_;
};

// Fences are queried and waited on in destructors and pool bookkeeping, which must not throw: after
// a sticky CUDA error (or at exit, with the runtime unloading) a fence counts as passed -- the
// device does no more work -- and the error surfaces from the next CUDA call that reports it.
class CudaFence : public DeviceFence {
 public:
  explicit CudaFence(const c10::cuda::CUDAStream& stream)
      : device_(stream.device_index()), event_(EventPool::take(device_)) {
    const cudaError_t err = cudaEventRecord(event_, stream.stream());
    if (err != cudaSuccess) {
      EventPool::give(device_, event_);
      C10_CUDA_CHECK(err);
    }
  }
  ~CudaFence() override { EventPool::give(device_, event_); }
  bool done() const override {
    if (passed_.load(std::memory_order_acquire)) return true;  // once passed, no more queries
    const cudaError_t err = cudaEventQuery(event_);
    if (err != cudaSuccess) (void)cudaGetLastError();  // not ready (not an error), or failed: counts as passed
    if (err == cudaErrorNotReady) return false;
    passed_.store(true, std::memory_order_release);
    return true;
  }
  void wait() const override {
    if (cudaEventSynchronize(event_) != cudaSuccess) (void)cudaGetLastError();
  }
  // The work queued on `stream` from now on starts after the fence.
  void order(const c10::cuda::CUDAStream& stream) const { C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), event_, 0)); }

 private:
  c10::DeviceIndex device_;
  cudaEvent_t event_;
  mutable std::atomic<bool> passed_{false};
};

#if defined(STOKER_CUDA_GATHER_KERNEL)
constexpr bool kGatherKernelBuilt = true;
#else
constexpr bool kGatherKernelBuilt = false;  // nvcc was not found when this was built: index_select
#endif

// STOKER_PINNED_STAGING: registered (default: staging locked in place on huge pages, its exact
// size) or torch (PyTorch's caching host allocator); anything else is refused.
bool registeredStagingWanted() {
  const char* v = std::getenv("STOKER_PINNED_STAGING");
  if (!v || !*v || std::strcmp(v, "registered") == 0) return true;
  if (std::strcmp(v, "torch") == 0) return false;
  throwBadInput("STOKER_PINNED_STAGING=" + std::string(v), "must be registered or torch");
}

// STOKER_CUDA_GATHER=index_select gathers with a torch op per field, as before the kernel (kept
// to measure the kernel against it, and as the path of builds without nvcc).
bool gatherKernelWanted() {
  const char* v = std::getenv("STOKER_CUDA_GATHER");
  return kGatherKernelBuilt && !(v && std::strcmp(v, "index_select") == 0);
}

// Host memory registered with CUDA by loaders, counted: two loaders over the same tensors (one per
// device, or a loader made again) share one registration, and the last to go undoes it.
class HostRegistry {
 public:
  static HostRegistry& instance() {
    static HostRegistry* registry = new HostRegistry;  // never destroyed: loaders may outlive statics
    return *registry;
  }
  // cudaSuccess, or the error; `owned` says whether the registry must undo it (memory pinned by
  // someone else -- torch's pin_memory, cudaHostAlloc -- is usable as it is and left alone).
  cudaError_t acquire(void* ptr, std::size_t bytes, unsigned flags, bool& owned) {
    std::lock_guard<std::mutex> lock(mutex_);
    owned = false;
    auto it = refs_.find(ptr);
    if (it != refs_.end()) {
      ++it->second;
      owned = true;
      return cudaSuccess;
    }
    cudaError_t err = cudaHostRegister(ptr, bytes, flags);
    if (err == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();
      return cudaSuccess;
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return err;
    }
    refs_[ptr] = 1;
    owned = true;
    return cudaSuccess;
  }
  void release(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = refs_.find(ptr);
    if (it == refs_.end() || --it->second > 0) return;
    refs_.erase(it);
    // Gathers still queued may read it: they are done before the pages are unpinned.
    (void)cudaDeviceSynchronize();
    (void)cudaHostUnregister(ptr);
    (void)cudaGetLastError();
  }

 private:
  std::mutex mutex_;
  std::map<void*, int> refs_;
};

// What mapHostFields hands out: the tensors (kept alive) and the registrations to undo.
struct HostMapping {
  std::vector<at::Tensor> tensors;
  std::vector<void*> owned;
  c10::DeviceIndex device = 0;
  ~HostMapping() {
    c10::cuda::CUDAGuard guard(device);
    for (void* p : owned) HostRegistry::instance().release(p);
  }
};

class CudaDevice : public DeviceBackend {
 public:
  explicit CudaDevice(int index) : index_(static_cast<c10::DeviceIndex>(index)), kernel_(gatherKernelWanted()),
        registerStaging_(registeredStagingWanted()) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index) != cudaSuccess) (void)cudaGetLastError();
    blocksCap_ = std::max(1, sms) * 8;  // 8 blocks of kThreadsPerBlock (256) threads fill an SM
  }
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  c10::Device torchDevice() const override { return c10::Device(c10::kCUDA, index_); }

  DeviceMemory memory() const override {
    initCudaOnce();
    c10::cuda::CUDAGuard guard(index_);
    std::size_t freeBytes = 0, totalBytes = 0;
    DeviceMemory m;
    if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) return m;
    m.total = static_cast<std::int64_t>(totalBytes);
    m.free = static_cast<std::int64_t>(freeBytes);
    m.used = m.total - m.free;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index_);
    constexpr std::size_t aggregate = 0;  // StatType::AGGREGATE (its namespace moved between releases)
    m.reserved = stats.reserved_bytes[aggregate].current;
    m.allocated = stats.allocated_bytes[aggregate].current;
    // Memory our allocator holds but no tensor uses is free for our next allocation.
    m.free += m.reserved - m.allocated;
    m.used -= m.reserved - m.allocated;
    return m;
  }

  // The caching allocator hands out memory freed on the calling thread's current stream, safe only
  // for work on that stream: kernels queued there may still use it. This thread's copies and
  // gathers run on its own stream, so that stream first waits for the current one.
  at::Tensor allocateBytes(std::int64_t bytes) override {
    c10::cuda::CUDAGuard guard(index_);
    at::Tensor block;
    try {
      block = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(torchDevice()));
    } catch (const c10::OutOfMemoryError& e) {
      throw Error(ErrorKind::OutOfMemory, name(), "out of memory allocating " + formatMiB(bytes));
    }
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index_);
    const c10::cuda::CUDAStream worker = threadStream();
    if (current != worker) {
      at::cuda::CUDAEvent allocated;
      allocated.record(current);
      allocated.block(worker);
    }
    return block;
  }

  // Pinned staging of 4 MiB and more is locked in place on huge pages, its exact size
  // (pinnedHostBytesInPlace); smaller blocks, and any the driver refuses to register, come from
  // PyTorch's caching host allocator. STOKER_PINNED_STAGING=torch takes the allocator for all (to
  // measure one against the other).
  at::Tensor allocateHostBytes(std::int64_t bytes, bool pinned) override {
    if (!pinned) return emptyHostBytes(bytes);
    if (stagesInPlace(bytes)) {
      const c10::DeviceIndex device = index_;
      at::Tensor block = pinnedHostBytesInPlace(
          bytes,
          [this, device](void* p, std::size_t n) {
            c10::cuda::CUDAGuard guard(device);
            const cudaError_t err = cudaHostRegister(p, n, cudaHostRegisterPortable);
            if (err == cudaSuccess) return true;
            (void)cudaGetLastError();
            registerRefused_.store(true);  // the rest, too, from the allocator (and counted so)
            return false;
          },
          [](void* p) {
            // The pool frees a block only once the copies that read it are done (its fence).
            (void)cudaHostUnregister(p);
            (void)cudaGetLastError();
          });
      if (block.defined()) return block;
    }
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  }

  std::int64_t heldHostBytes(std::int64_t bytes, bool pinned) const override {
    return !pinned || stagesInPlace(bytes) ? bytes : cachingHostAllocatorBytes(bytes);
  }

  // From pageable memory cudaMemcpyAsync returns once the source is staged (reusable), from
  // pinned memory at once: the staging block's release waits on fenceQueuedWork().
  void copyToDevice(void* dst, const void* src, std::int64_t bytes, bool /*pinnedSource*/) override {
    c10::cuda::CUDAGuard guard(index_);
    c10::cuda::CUDAStream stream = threadStream();
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, stream.stream()));
  }

  void gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) override {
    c10::cuda::CUDAGuard guard(index_);
    c10::cuda::CUDAStream stream = threadStream();
    c10::cuda::CUDAStreamGuard onStream(stream);
    // The indices go through pinned memory so their copy is queued like the gather (a pageable
    // source would make the copy wait for this stream). The host allocator keeps the pinned block
    // until the copy is done (it records an event on the stream).
    at::Tensor hostIdx = at::empty({count}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    std::memcpy(hostIdx.data_ptr(), indices, static_cast<std::size_t>(count) * sizeof(std::int64_t));
    at::Tensor idx = hostIdx.to(torchDevice(), /*non_blocking=*/true);
    std::vector<std::int64_t> shape = field.sizes().vec();
    shape[0] = count;
    at::Tensor dst = at::for_blob(out, shape).options(field.options()).target_device(field.device()).make_tensor();  // no pointer query
    at::index_select_out(dst, field, 0, idx);
  }

  // One launch of data/cuda_gather per kMaxFields fields and kMaxRows rows, on this thread's
  // stream, the indices inside the launch's parameters: no allocation, upload or pointer query.
  void gatherBatch(const std::vector<at::Tensor>& fields, const std::int64_t* indices, std::int64_t count,
                   const std::vector<std::uint8_t*>& outs) override {
    if (!kernel_) {
      for (const auto& f : fields)
        if (!f.is_cuda()) throwBadInput("gather", "a host field needs the gather kernel (this build has none)");
      DeviceBackend::gatherBatch(fields, indices, count, outs);
      return;
    }
    if (count <= 0) return;
    c10::cuda::CUDAGuard guard(index_);
    void* stream = threadStream().stream();
    if (count <= cuda_gather::kSmallRows) {
      cuda_gather::SmallLaunch a;
      launchAll(a, fields, indices, count, outs, stream);
    } else {
      cuda_gather::Launch a;
      launchAll(a, fields, indices, count, outs, stream);
    }
  }

  // One launch of data/cuda_expand on this thread's stream, after the copy of the bytes it widens.
  void expandBytes(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast,
                   void* out) override {
    if (samples <= 0 || e.plane <= 0) return;
    c10::cuda::CUDAGuard guard(index_);
    void* stream = threadStream().stream();
    const cuda_expand::Launch a = cuda_expand::launchFor(e, in, samples, channelsLast, out);
#if defined(STOKER_CUDA_GATHER_KERNEL)
    const int err = cuda_expand::launch(a, cuda_expand::blocksFor(a, blocksCap_), stream);
#else
    (void)a;
    (void)stream;  // not reached: expandsBytes() says no, and launch() is not linked
    const int err = static_cast<int>(cudaErrorNotSupported);
#endif
    if (err != 0) C10_CUDA_CHECK(static_cast<cudaError_t>(err));
  }

  bool expandsBytes(std::string& why) const override {
    why = kGatherKernelBuilt ? "" : "this build has no CUDA kernels (nvcc was not found)";
    return kGatherKernelBuilt;
  }

  // Registered mapped (and read-only where the device allows): the kernel reads the rows over the
  // bus. It needs the host pointer to be the device pointer (true on 64-bit Linux since unified
  // addressing; checked).
  std::shared_ptr<void> mapHostFields(const std::vector<at::Tensor>& host, std::string& why) override {
    if (!kernel_) {
      why = kGatherKernelBuilt ? "STOKER_CUDA_GATHER=index_select" : "this build has no gather kernel (nvcc was not found)";
      return nullptr;
    }
    initCudaOnce();
    c10::cuda::CUDAGuard guard(index_);
    int hostPointers = 0, readOnly = 0;
    if (cudaDeviceGetAttribute(&hostPointers, cudaDevAttrCanUseHostPointerForRegisteredMem, index_) != cudaSuccess ||
        cudaDeviceGetAttribute(&readOnly, cudaDevAttrHostRegisterReadOnlySupported, index_) != cudaSuccess) {
      (void)cudaGetLastError();
      hostPointers = 0;
    }
    if (!hostPointers) {
      why = name() + " cannot read registered host memory at its host address";
      return nullptr;
    }
    const unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable | (readOnly ? cudaHostRegisterReadOnly : 0u);
    auto mapping = std::make_shared<HostMapping>();
    mapping->device = index_;
    for (const at::Tensor& t : host) {
      if (!t.is_cpu() || !t.is_contiguous()) {
        why = "a field is not contiguous host memory";
        return nullptr;
      }
      mapping->tensors.push_back(t);
      if (t.nbytes() == 0) continue;
      bool owned = false;
      const cudaError_t err = HostRegistry::instance().acquire(t.data_ptr(), t.nbytes(), flags, owned);
      if (err != cudaSuccess) {
        why = std::string("registering ") + formatMiB(static_cast<std::int64_t>(t.nbytes())) +
              " of host memory with CUDA failed: " + cudaGetErrorString(err);
        return nullptr;  // what was registered is undone with the mapping
      }
      if (owned) mapping->owned.push_back(t.data_ptr());
      void* onDevice = nullptr;
      if (cudaHostGetDevicePointer(&onDevice, t.data_ptr(), 0) != cudaSuccess || onDevice != t.data_ptr()) {
        (void)cudaGetLastError();
        why = name() + " maps host memory at another address";
        return nullptr;
      }
    }
    return mapping;
  }

  std::shared_ptr<DeviceFence> fenceQueuedWork() override {
    c10::cuda::CUDAGuard guard(index_);
    return std::make_shared<CudaFence>(threadStream());
  }

  void orderAfter(const DeviceFence& fence) override {
    c10::cuda::CUDAGuard guard(index_);
    if (auto* cuda = dynamic_cast<const CudaFence*>(&fence)) cuda->order(c10::cuda::getCurrentCUDAStream(index_));
    else fence.wait();
  }

  FenceMaker streamUseFence(const c10::Stream& stream) override {
    if (stream.device_type() != c10::kCUDA || stream.device_index() != index_)
      throwBadInput("record_stream", "a stream on " + stream.device().str() + " for a batch on " + name());
    const c10::cuda::CUDAStream used(stream);
    const c10::DeviceIndex index = index_;
    return [used, index]() -> std::shared_ptr<DeviceFence> {
      c10::cuda::CUDAGuard guard(index);
      return std::make_shared<CudaFence>(used);
    };
  }

  // A stream capturing a graph would record the hand-over's wait into the graph (replayed later
  // against events long reused) and the batch would be read at replay, not now.
  void refuseCapture() override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(index_).stream(), &status) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (status != cudaStreamCaptureStatusNone)
      throw Error(ErrorKind::BadInput, "next()",
                  "the current stream on " + name() + " is capturing a CUDA graph: take the batch before the capture "
                  "and copy it into the graph's static inputs (batches cannot be handed over inside a graph)");
  }

  FenceMaker consumerUseFence() override {
    const c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(index_);
    const c10::DeviceIndex index = index_;
    return [consumer, index]() -> std::shared_ptr<DeviceFence> {
      c10::cuda::CUDAGuard guard(index);
      return std::make_shared<CudaFence>(consumer);
    };
  }

 private:
  // One stream per producing thread and device: copies of different batches overlap.
  c10::cuda::CUDAStream threadStream() {
    thread_local std::vector<std::optional<c10::cuda::CUDAStream>> streams;
    if (streams.size() <= static_cast<std::size_t>(index_)) streams.resize(static_cast<std::size_t>(index_) + 1);
    auto& s = streams[static_cast<std::size_t>(index_)];
    if (!s) s = c10::cuda::getStreamFromPool(false, index_);
    return *s;
  }

  template <class L>
  void launchAll(L& a, const std::vector<at::Tensor>& fields, const std::int64_t* indices, std::int64_t count,
                 const std::vector<std::uint8_t*>& outs, void* stream) {
    for (std::size_t f0 = 0; f0 < fields.size(); f0 += cuda_gather::kMaxFields) {
      const std::size_t nf = std::min<std::size_t>(cuda_gather::kMaxFields, fields.size() - f0);
      for (std::int64_t r0 = 0; r0 < count; r0 += L::kRows) {
        const std::int64_t rows = std::min<std::int64_t>(L::kRows, count - r0);
        a.fieldCount = static_cast<std::int32_t>(nf);
        a.rows = static_cast<std::int32_t>(rows);
        std::memcpy(a.idx, indices + r0, static_cast<std::size_t>(rows) * sizeof(std::int64_t));
        for (std::size_t k = 0; k < nf; ++k) {
          const at::Tensor& t = fields[f0 + k];
          cuda_gather::Field& fd = a.fields[k];
          fd.rowBytes = t.size(0) > 0 ? static_cast<std::int64_t>(t.nbytes()) / t.size(0) : 0;
          fd.src = static_cast<const unsigned char*>(t.data_ptr());
          fd.dst = outs[f0 + k] + r0 * fd.rowBytes;
          fd.width = cuda_gather::elementWidth(fd.src, fd.dst, fd.rowBytes);  // empty rows: no elements
        }
#if defined(STOKER_CUDA_GATHER_KERNEL)
        const int err = cuda_gather::launch(a, cuda_gather::blocksFor(a, cuda_gather::kThreadsPerBlock, blocksCap_), stream);
#else
        (void)stream;  // not reached: without the kernel kernel_ is false (and launch() is not linked)
        const int err = static_cast<int>(cudaErrorNotSupported);
#endif
        if (err != 0) C10_CUDA_CHECK(static_cast<cudaError_t>(err));
      }
    }
  }

  c10::DeviceIndex index_;
  bool kernel_;        // gather with data/cuda_gather (else index_select per field)
  int blocksCap_ = 8;  // thread blocks per gather launch at most
  bool registerStaging_;  // STOKER_PINNED_STAGING: pinned staging locked in place (else the allocator)
  // The driver refused to register a staging block once: the later ones come from the caching
  // allocator (and heldHostBytes counts them so).
  mutable std::atomic<bool> registerRefused_{false};

  // Whether a pinned staging block of `bytes` is locked in place (pinnedHostBytesInPlace), not
  // taken from the caching allocator.
  bool stagesInPlace(std::int64_t bytes) const {
    return registerStaging_ && !registerRefused_.load() && hostBlockOnHugePages(bytes);
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> createCudaBackend(int index) {
  const int count = static_cast<int>(c10::cuda::device_count());
  if (index >= count)
    throwBadInput("device cuda:" + std::to_string(index), std::to_string(count) + " CUDA device(s) visible");
  return std::make_shared<CudaDevice>(index);
}

int cudaDeviceCount() { return static_cast<int>(c10::cuda::device_count()); }

}  // namespace stoker
