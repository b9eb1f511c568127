#include "data/device.h"

#include <set>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/byte_size.h"
#include "util/error.h"
#include "util/huge_pages.h"

namespace stoker {

#ifdef STOKER_WITH_CUDA
std::shared_ptr<DeviceBackend> createCudaBackend(int index);  // cuda_device.cpp
int cudaDeviceCount();
#endif

namespace {

class CpuDevice : public DeviceBackend {
 public:
  std::string name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  DeviceMemory memory() const override { return hostMemory(); }
  at::Tensor allocateBytes(std::int64_t bytes) override {
    try {
      return emptyHostBytes(bytes);
    } catch (const c10::Error&) {
      throw Error(ErrorKind::OutOfMemory, "cpu", "cannot allocate " + std::to_string(bytes) + " bytes");
    }
  }
  void copyToDevice(void* dst, const void* src, std::int64_t bytes, bool) override {
    std::memcpy(dst, src, static_cast<std::size_t>(bytes));
  }
  void gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) override {
    gatherHostRows(field, indices, count, out);
  }
  c10::Device torchDevice() const override { return c10::Device(c10::kCPU); }
};

}  // namespace

DeviceSpec DeviceSpec::parse(const std::string& text) {
  DeviceSpec spec;
  std::string kind = text, index;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    index = text.substr(colon + 1);
  }
  if (kind == "cpu" && index.empty()) return spec;
  if (kind == "sim") spec.kind = DeviceKind::Sim;
  else if (kind == "cuda") spec.kind = DeviceKind::Cuda;
  else throwBadInput("device " + text, "unknown (known: cpu, sim:N, cuda:N)");
  if (!index.empty()) {
    char* end = nullptr;
    long v = std::strtol(index.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1023) throwBadInput("device " + text, "the index must be 0-1023");
    spec.index = static_cast<int>(v);
  }
  return spec;
}

std::vector<DeviceSpec> expandDevices(const std::string& text) {
  if (text.find(',') != std::string::npos) {  // "sim:0,sim:1": one backend each
    std::vector<DeviceSpec> out;
    std::set<std::string> seen;
    for (std::size_t at = 0; at <= text.size();) {
      const std::size_t comma = std::min(text.find(',', at), text.size());
      DeviceSpec d = DeviceSpec::parse(text.substr(at, comma - at));
      if (!seen.insert(d.name()).second) throwBadInput("device " + d.name(), "is listed twice");
      out.push_back(d);
      at = comma + 1;
    }
    return out;
  }
  if (text != "all") return {DeviceSpec::parse(text)};
  std::vector<DeviceSpec> out;
#ifdef STOKER_WITH_CUDA
  for (int i = 0; i < cudaDeviceCount(); ++i) out.push_back(DeviceSpec{DeviceKind::Cuda, i});
#endif
  if (out.empty()) out.push_back(DeviceSpec{});
  return out;
}

std::string DeviceSpec::name() const {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Sim: return "sim:" + std::to_string(index);
    case DeviceKind::Cuda: return "cuda:" + std::to_string(index);
  }
  return "?";
}

std::shared_ptr<DeviceBackend> DeviceBackend::create(const DeviceSpec& spec, const SimDeviceConfig& sim) {
  switch (spec.kind) {
    case DeviceKind::Cpu: return std::make_shared<CpuDevice>();
    case DeviceKind::Sim: return std::make_shared<SimDevice>(spec.index, sim);
    case DeviceKind::Cuda:
#ifdef STOKER_WITH_CUDA
      return createCudaBackend(spec.index);
#else
      throwBadInput("device " + spec.name(), "this build's libtorch has no CUDA (use cpu or sim:N)");
#endif
  }
  return nullptr;
}

at::Tensor DeviceBackend::allocateHostBytes(std::int64_t bytes, bool /*pinned*/) { return emptyHostBytes(bytes); }

void DeviceBackend::gatherBatch(const std::vector<at::Tensor>& fields, const std::int64_t* indices, std::int64_t count,
                                const std::vector<std::uint8_t*>& outs) {
  for (std::size_t f = 0; f < fields.size(); ++f) gatherRows(fields[f], indices, count, outs[f]);
}

void DeviceBackend::expandBytes(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast,
                                void* out) {
  expandBytesOnHost(e, in, samples, channelsLast, out);  // cpu and sim: device memory is host memory
}

FenceMaker DeviceBackend::streamUseFence(const c10::Stream& stream) {
  if (stream.device_type() != c10::kCPU)
    throwBadInput("record_stream", "a stream on " + stream.device().str() + " for a batch on " + name());
  return {};  // host devices finish their work before returning
}

std::shared_ptr<void> DeviceBackend::mapHostFields(const std::vector<at::Tensor>& /*host*/, std::string& why) {
  why.clear();  // host memory is where this device's batches are made already
  return nullptr;
}

bool hostBlockOnHugePages(std::int64_t bytes) {
  return bytes >= 2 * static_cast<std::int64_t>(kHugePageBytes) && hugePagesWanted();
}

at::Tensor emptyHostBytes(std::int64_t bytes) {
  constexpr auto kHuge = static_cast<std::int64_t>(kHugePageBytes);
  if (!hostBlockOnHugePages(bytes)) return at::empty({bytes}, at::kByte);
  // One huge page more than asked, to start on a boundary: the slack before it is never touched,
  // so it costs address space, not memory.
  at::Tensor raw = at::empty({bytes + kHuge}, at::kByte);
  auto* base = static_cast<std::uint8_t*>(raw.data_ptr());
  const std::int64_t offset = (kHuge - static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(base) % kHugePageBytes)) % kHuge;
  adviseHugePages(base + offset, static_cast<std::size_t>(bytes / kHuge * kHuge));  // the whole huge pages in it
  return raw.narrow(0, offset, bytes);
}

at::Tensor pinnedHostBytesInPlace(std::int64_t bytes, const PinHostMemory& pin, UnpinHostMemory unpin) {
  if (!hostBlockOnHugePages(bytes)) return {};  // below 4 MiB, or no huge pages: not even allocated
  at::Tensor raw = emptyHostBytes(bytes);
  void* p = raw.data_ptr();
  if (!pin(p, static_cast<std::size_t>(bytes))) return {};
  // The deleter holds the memory (`raw`) and unlocks it before letting it go.
  return at::from_blob(p, {bytes}, [raw, unpin = std::move(unpin)](void* q) mutable {
    unpin(q);
    raw = at::Tensor();
  }, at::TensorOptions().dtype(at::kByte));
}

std::int64_t cachingHostAllocatorBytes(std::int64_t bytes) {
  std::int64_t held = 1;
  while (held < bytes) held <<= 1;
  return held;
}

DeviceMemory hostMemory() {
  DeviceMemory m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total = kib * 1024;
    if (key == "MemAvailable:") m.free = kib * 1024;
  }
  m.used = m.total - m.free;
  return m;
}

SimDevice::SimDevice(int index, SimDeviceConfig config) : index_(index), config_(config) {
  if (config_.capacityBytes <= 0) throwBadInput(name(), "capacity must be positive");
  if (!(config_.copyBytesPerSecond > 0)) throwBadInput(name(), "copy bandwidth must be positive");
}

DeviceMemory SimDevice::memory() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceMemory m;
  m.total = config_.capacityBytes;
  m.used = std::min(m.total, config_.otherUseBytes + charged_);
  m.free = m.total - m.used;
  m.reserved = charged_;
  m.allocated = charged_;
  return m;
}

at::Tensor SimDevice::allocateBytes(std::int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::int64_t free = config_.capacityBytes - config_.otherUseBytes - charged_;
    const std::int64_t block = config_.largestBlockBytes > 0 ? std::min(config_.largestBlockBytes, free) : free;
    if (bytes > block)
      throw Error(ErrorKind::OutOfMemory, name(),
                  "out of memory allocating " + formatMiB(bytes) + " (" + formatMiB(free) + " free, largest block " + formatMiB(block) + ")");
    charged_ += bytes;
  }
  at::Tensor host = at::empty({bytes}, at::kByte);
  std::weak_ptr<SimDevice> self = weak_from_this();
  // The device memory is host memory charged to the simulated capacity
  // until the last view of it is freed.
  return at::from_blob(
      host.data_ptr(), {bytes},
      [host, self, bytes](void*) mutable {
        if (auto device = self.lock()) {
          std::lock_guard<std::mutex> lock(device->mutex_);
          device->charged_ -= bytes;
        }
        host.reset();
      },
      at::TensorOptions().dtype(at::kByte));
}

void SimDevice::copyToDevice(void* dst, const void* src, std::int64_t bytes, bool pinnedSource) {
  // Pageable sources go through a bounce buffer on real hardware: about half
  // the bandwidth.
  const double bandwidth = config_.copyBytesPerSecond * (pinnedSource ? 1.0 : 0.5);
  std::lock_guard<std::mutex> engine(copyEngine_);
  const auto start = std::chrono::steady_clock::now();
  std::memcpy(dst, src, static_cast<std::size_t>(bytes));
  std::this_thread::sleep_until(start + std::chrono::duration<double>(static_cast<double>(bytes) / bandwidth));
  std::lock_guard<std::mutex> lock(mutex_);
  copied_ += bytes;
}

void SimDevice::gatherRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) {
  gatherHostRows(field, indices, count, out);
}

#ifndef STOKER_WITH_CUDA
ResidentReplicas broadcastResident(const std::vector<at::Tensor>&, const std::vector<std::shared_ptr<DeviceBackend>>&) {
  return {{}, "this build's libtorch has no CUDA"};  // cuda_broadcast.cpp in CUDA builds
}
#endif

void finishQueuedWork(DeviceBackend& device) {
  if (auto fence = device.fenceQueuedWork()) fence->wait();
}

namespace {

// Rows ahead of the one being copied whose cache lines are asked for: a gather jumps to a random
// row each time, and the hardware prefetcher, which follows sequential streams, learns a short
// row only once it is read. Measured on Fashion-MNIST's 784-byte rows (2 threads): 3.3 M rows/s
// without, 6.9 M with; float32 rows of 3,136 bytes, bandwidth-bound, gain ~10 %. Rows longer than
// kPrefetchRowBytes stream well on their own.
constexpr std::int64_t kPrefetchRowsAhead = 4;
constexpr std::int64_t kPrefetchRowBytes = 4096;
constexpr std::int64_t kCacheLine = 64;

inline void prefetchRow(const std::uint8_t* row, std::int64_t bytes) {
  for (std::int64_t off = 0; off < bytes; off += kCacheLine) __builtin_prefetch(row + off);
}

}  // namespace

void gatherHostRows(const at::Tensor& field, const std::int64_t* indices, std::int64_t count, void* out) {
  const auto* src = static_cast<const std::uint8_t*>(field.data_ptr());
  auto* dst = static_cast<std::uint8_t*>(out);
  const std::int64_t rowBytes = field.size(0) > 0 ? static_cast<std::int64_t>(field.nbytes()) / field.size(0) : 0;
  const auto n = static_cast<std::size_t>(rowBytes);
  const bool prefetch = rowBytes <= kPrefetchRowBytes;
  // Batches are gathered in parallel by the loader's workers (and a waiting
  // consumer), so one gather stays on one thread.
  for (std::int64_t i = 0; i < count; ++i, dst += n) {
    if (prefetch && i + kPrefetchRowsAhead < count) prefetchRow(src + indices[i + kPrefetchRowsAhead] * rowBytes, rowBytes);
    std::memcpy(dst, src + indices[i] * rowBytes, n);
  }
}

void gatherScaledHostRows(const at::Tensor& bytes, float divisor, const std::int64_t* indices, std::int64_t count, float* out) {
  const auto* src = static_cast<const std::uint8_t*>(bytes.data_ptr());
  const std::int64_t row = bytes.size(0) > 0 ? static_cast<std::int64_t>(bytes.nbytes()) / bytes.size(0) : 0;
  for (std::int64_t i = 0; i < count; ++i, out += row) {
    if (i + kPrefetchRowsAhead < count) prefetchRow(src + indices[i + kPrefetchRowsAhead] * row, std::min(row, kPrefetchRowBytes));
    const std::uint8_t* in = src + indices[i] * row;
    // A division, not a multiplication by 1 / divisor: that rounds differently for about half of
    // the 256 bytes. The compiler vectorises it; with the rows prefetched it costs far less than
    // the DRAM traffic it saves (two threads: 6.9 M Fashion-MNIST rows/s against 2.3 M for
    // float32 rows by memcpy).
    for (std::int64_t j = 0; j < row; ++j) out[j] = static_cast<float>(in[j]) / divisor;
  }
}

void SimDevice::setOtherUse(std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  config_.otherUseBytes = bytes;
}

std::int64_t SimDevice::bytesCopied() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return copied_;
}

}  // namespace stoker
