// data/cuda_device: the CUDA DeviceBackend, compiled only against a CUDA
// libtorch (STOKER_WITH_CUDA). Memory figures come from cudaMemGetInfo and
// the caching allocator's statistics; each producing thread copies and
// gathers on a stream of its own from libtorch's pool and fences the work
// with an event before the batch is handed over, so the consumer's stream
// never waits on a half-copied batch and staging buffers are reusable.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "data/device.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {
namespace {

class CudaDevice : public DeviceBackend {
 public:
  explicit CudaDevice(int index) : index_(static_cast<c10::DeviceIndex>(index)) {}
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  c10::Device torchDevice() const override { return c10::Device(c10::kCUDA, index_); }

  DeviceMemory memory() const override {
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

  at::Tensor allocateBytes(std::int64_t bytes) override {
    c10::cuda::CUDAGuard guard(index_);
    try {
      return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(torchDevice()));
    } catch (const c10::OutOfMemoryError& e) {
      throw Error(ErrorKind::OutOfMemory, name(), "out of memory allocating " + formatMiB(bytes));
    }
  }

  at::Tensor allocateHostBytes(std::int64_t bytes, bool pinned) override {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
  }

  void copyToDevice(void* dst, const void* src, std::int64_t bytes, bool /*pinnedSource*/) override {
    c10::cuda::CUDAGuard guard(index_);
    c10::cuda::CUDAStream stream = threadStream();
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, stream.stream()));
    fence(stream);
  }

  void gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) override {
    c10::cuda::CUDAGuard guard(index_);
    c10::cuda::CUDAStream stream = threadStream();
    c10::cuda::CUDAStreamGuard onStream(stream);
    at::Tensor hostIdx = at::from_blob(const_cast<std::int64_t*>(indices), {count}, at::kLong);
    at::Tensor idx = hostIdx.to(torchDevice(), /*non_blocking=*/false);
    std::vector<std::int64_t> shape = field.sizes().vec();
    shape[0] = count;
    at::Tensor dst = at::from_blob(out, shape, field.options());
    at::index_select_out(dst, field, 0, idx);
    fence(stream);
  }

 private:
  // One stream per producing thread and device: copies of different batches overlap.
  c10::cuda::CUDAStream threadStream() {
    thread_local std::vector<c10::optional<c10::cuda::CUDAStream>> streams;
    if (streams.size() <= static_cast<std::size_t>(index_)) streams.resize(static_cast<std::size_t>(index_) + 1);
    auto& s = streams[static_cast<std::size_t>(index_)];
    if (!s) s = c10::cuda::getStreamFromPool(false, index_);
    return *s;
  }
  static void fence(const c10::cuda::CUDAStream& stream) {
    at::cuda::CUDAEvent done;
    done.record(stream);
    done.synchronize();
  }

  c10::DeviceIndex index_;
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
