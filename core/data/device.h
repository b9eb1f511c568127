// data/device: where batches end up. One DeviceBackend per device owns what
// differs between them: memory probing (total/free/used, and the caching
// allocator's reserved/allocated on CUDA), allocation that reports
// out-of-memory as Error(OutOfMemory), host-to-device copies and the gather
// of resident fields.
//   cpu    the host: datasets in memory are already "on the device".
//   sim:N  a simulated accelerator with a set capacity and copy bandwidth:
//          memory is host memory charged against the capacity, copies take
//          bytes / bandwidth, so mode choice, OOM fallback and prefetch depth
//          adaptation run (and are tested) without a GPU.
//   cuda:N a CUDA device; only in builds against a CUDA libtorch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/device_fence.h"
#include "image/byte_expansion.h"

namespace stoker {

enum class DeviceKind { Cpu, Sim, Cuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;
  // "cpu", "sim:N", "cuda:N" (also "cuda" = cuda:0, "sim" = sim:0).
  static DeviceSpec parse(const std::string& text);
  std::string name() const;
};

// "all": every visible CUDA device, or the host when there is none (or this
// build has no CUDA); anything else: that one device.
// "all" (every CUDA device, else cpu), a comma list ("sim:0,sim:1") or one device.
std::vector<DeviceSpec> expandDevices(const std::string& text);

struct SimDeviceConfig {
  std::int64_t capacityBytes = 1LL << 30;
  double copyBytesPerSecond = 12e9;  // about PCIe 4.0 x16 from pinned memory
  // Largest single allocation that succeeds (0 = capacity): below the free
  // memory it simulates fragmentation, where a probe sees room that one
  // allocation cannot get -- the case OOM fallback exists for.
  std::int64_t largestBlockBytes = 0;
  std::int64_t otherUseBytes = 0;  // memory held by other tenants
};

struct DeviceMemory {
  std::int64_t total = 0;
  std::int64_t free = 0;
  std::int64_t used = 0;       // by everyone
  std::int64_t reserved = 0;   // by this process's allocator (CUDA caching allocator, sim)
  std::int64_t allocated = 0;  // in live tensors of this process
};

class DeviceBackend {
 public:
  static std::shared_ptr<DeviceBackend> create(const DeviceSpec& spec, const SimDeviceConfig& sim = {});
  virtual ~DeviceBackend() = default;

  virtual std::string name() const = 0;
  virtual DeviceKind kind() const = 0;
  // Batches in host memory need no copy: the staging buffer is the batch.
  bool isHost() const { return kind() == DeviceKind::Cpu; }
  virtual DeviceMemory memory() const = 0;
  // An uninitialised contiguous buffer of `bytes` on the device; throws
  // Error(OutOfMemory) naming the device and the sizes.
  virtual at::Tensor allocateBytes(std::int64_t bytes) = 0;
  // Host staging memory, page-locked when `pinned` and the device has a use for it.
  virtual at::Tensor allocateHostBytes(std::int64_t bytes, bool pinned);
  // The host memory a block of allocateHostBytes(bytes, pinned) really holds (pinned_bytes).
  virtual std::int64_t heldHostBytes(std::int64_t bytes, bool /*pinned*/) const { return bytes; }
  // Copies `bytes` from host `src` to device `dst`. Host devices (cpu, sim)
  // return with the copy done; CUDA queues it on this thread's copy stream
  // and returns at once: fenceQueuedWork() says when it is done, and `src`
  // (pinned) must not be reused before.
  virtual void copyToDevice(void* dst, const void* src, std::int64_t bytes, bool pinnedSource) = 0;
  // out[i] = field[indices[i]]: `field` is a contiguous [N, ...] tensor on
  // the device, `out` room for `count` rows of it there. Indices are host
  // values already checked against N. Queued like copyToDevice.
  virtual void gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) = 0;
  // gatherRows for every field of a batch at once: outs[f][i] = fields[f][indices[i]] (CUDA: one
  // kernel launch for all fields, data/cuda_gather). A field may also be host memory this device
  // mapped (mapHostFields). The default gathers field by field.
  virtual void gatherBatch(const std::vector<at::Tensor>& fields, const std::int64_t* indices, std::int64_t count,
                           const std::vector<std::uint8_t*>& outs);
  // Makes a dataset's host-memory fields readable by this device's gatherBatch, so a streaming
  // batch is gathered from them straight into device memory, with no staging copy (CUDA: the
  // memory registered with the driver, mapped and read-only; a registration shared by loaders of
  // the same tensors). Returns what keeps the mapping (dropping it undoes it, after the device's
  // queued work), or null with `why` where this device cannot (cpu and sim: nothing to map).
  virtual std::shared_ptr<void> mapHostFields(const std::vector<at::Tensor>& host, std::string& why);
  // Widens `samples` samples of bytes at `in` (device memory) into `out` (there too) through the
  // expansion's tables, NCHW or channels-last (normalize_on: device). Queued like copyToDevice
  // (CUDA: one kernel, data/cuda_expand); the default runs on the host (cpu, sim).
  virtual void expandBytes(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast, void* out);
  // Whether expandBytes can run here; false with `why` where it cannot (a CUDA build without nvcc).
  virtual bool expandsBytes(std::string& why) const {
    why.clear();
    return true;
  }
  // A fence after the copies and gathers this thread has queued so far; null
  // where they were done on return (cpu, sim).
  virtual std::shared_ptr<DeviceFence> fenceQueuedWork() { return nullptr; }
  // Makes the device work the calling thread queues next (CUDA: on its
  // current stream) start after `fence`, without blocking the CPU: a batch
  // handed over is ready on the consumer's stream, as with PyTorch's
  // non_blocking=True.
  virtual void orderAfter(const DeviceFence& fence) { fence.wait(); }
  // Called at a batch's hand-over on the consumer's thread: what makes, when
  // the batch's block is released, the fence after everything the consumer
  // queued on it (CUDA: an event on the consumer's current stream). Empty
  // where the consumer's work is done when it drops the block.
  virtual FenceMaker consumerUseFence() { return {}; }
  // Batch::recordStream: what makes, when the batch's block is released, the fence after the work
  // queued on `stream` (CUDA: an event on it). Empty on host devices; Error(BadInput) naming
  // record_stream for a stream of another device.
  virtual FenceMaker streamUseFence(const c10::Stream& stream);
  // Called by next() before it takes a batch: Error(BadInput) where the consumer's stream cannot
  // take one (CUDA: it is capturing a CUDA graph, which the hand-over's wait cannot join).
  virtual void refuseCapture() {}
  // The libtorch device batches are created on.
  virtual c10::Device torchDevice() const = 0;
};

// The simulated device, exposed so tests and demos can change its conditions.
class SimDevice : public DeviceBackend, public std::enable_shared_from_this<SimDevice> {
 public:
  SimDevice(int index, SimDeviceConfig config);
  std::string name() const override { return "sim:" + std::to_string(index_); }
  DeviceKind kind() const override { return DeviceKind::Sim; }
  DeviceMemory memory() const override;
  at::Tensor allocateBytes(std::int64_t bytes) override;
  void copyToDevice(void* dst, const void* src, std::int64_t bytes, bool pinnedSource) override;
  void gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) override;
  c10::Device torchDevice() const override { return c10::Device(c10::kCPU); }

  void setOtherUse(std::int64_t bytes);
  std::int64_t bytesCopied() const;

 private:
  int index_;
  mutable std::mutex mutex_;
  SimDeviceConfig config_;
  std::int64_t charged_ = 0;
  std::int64_t copied_ = 0;
  std::mutex copyEngine_;  // one copy engine: transfers queue behind each other
};

// Host memory figures from /proc/meminfo (total, MemAvailable).
DeviceMemory hostMemory();
// An uninitialised host buffer of `bytes` (pageable). From 4 MiB up it starts on a 2 MiB boundary
// and asks for huge pages (util/huge_pages), unless STOKER_HUGE_PAGES=0: the workers write each
// batch block once, and on 4 KiB pages its TLB misses cost the image pipeline ~5 % on the 2-core VM.
at::Tensor emptyHostBytes(std::int64_t bytes);
// Whether emptyHostBytes puts a block of `bytes` on 2 MiB pages (4 MiB and more, huge pages wanted).
bool hostBlockOnHugePages(std::int64_t bytes);
// Page-locked staging without PyTorch's caching host allocator, which rounds every block up to a
// power of two (a float32 image batch of 36.8 MiB held 64 MiB) and hands out 4 KiB pages: a block
// of `bytes` from emptyHostBytes (2 MiB-aligned huge pages from 4 MiB up), locked in place by
// `pin` (cudaHostRegister on CUDA) and unlocked by `unpin` before its memory goes with the last
// reference. An undefined tensor where `pin` refused or the block is not on 2 MiB pages (smaller
// than 4 MiB, or STOKER_HUGE_PAGES=0): the caller falls back to the caching allocator.
using PinHostMemory = std::function<bool(void* p, std::size_t bytes)>;
using UnpinHostMemory = std::function<void(void* p)>;
at::Tensor pinnedHostBytesInPlace(std::int64_t bytes, const PinHostMemory& pin, UnpinHostMemory unpin);
// What PyTorch's caching host allocator holds for a block of `bytes`: the next power of two.
std::int64_t cachingHostAllocatorBytes(std::int64_t bytes);

// A resident dataset's fields copied to other devices: perTarget[t][f], or empty with `why`.
struct ResidentReplicas {
  std::vector<std::vector<at::Tensor>> perTarget;
  std::string why;
};
// The fields (contiguous, on one CUDA device) replicated onto each of `targets` (other CUDA
// devices) by NCCL broadcast, one communicator for the local devices; empty with the reason
// where that cannot be (other kinds of device, a build without CUDA or NCCL, out of memory): the
// caller then copies from the host.
ResidentReplicas broadcastResident(const std::vector<at::Tensor>& fields,
                                   const std::vector<std::shared_ptr<DeviceBackend>>& targets);

// Blocks until the copies and gathers this thread queued on `device` are done.
void finishQueuedWork(DeviceBackend& device);
// Row copies for host-memory devices (cpu, sim).
void gatherHostRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out);
// Rows of the u8 tensor `bytes`, each byte written to `out` as float32 byte / divisor (a dataset's
// ScaledBytes): a quarter of the bytes read that the float32 rows would need.
void gatherScaledHostRows(const at::Tensor& bytes, float divisor, const std::int64_t* indices, std::int64_t count, float* out);

}  // namespace stoker
