// cuda_check: the CUDA feeding path on a real GPU, the checks and figures of `stoker.sh gpu-check`.
// A plain program, not a Qt Test suite: the GPU machines it runs on have CUDA and PyTorch but no
// Qt. Prints one JSON object per line -- {"check": ..., "ok": ..., "detail": ...} per check,
// {"figure": ..., "value": ..., "unit": ...} per measurement -- and exits 1 when a check fails,
// 77 (CTest's skip) when no CUDA device is visible. Without a CUDA libtorch it is only compiled
// (the CUDA syntax check), so it cannot rot where there is no GPU.
//
//   stoker_cuda_check            the checks
//   stoker_cuda_check --bench    the figures too: streaming H2D vs a pinned cudaMemcpyAsync loop,
//                                resident gather vs a device-to-device copy of the same bytes
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/datasets/tensor_dataset.h"
#include "data/device.h"
#include "data/loader.h"
#include "data/multi_device_loader.h"
#include "dist/dist_group.h"
#include "telemetry/telemetry_record.h"

using namespace stoker;
using Clock = std::chrono::steady_clock;

namespace {

bool failed = false;

void report(const std::string& check, bool ok, const std::string& detail, bool skipped = false) {
  failed = failed || !ok;
  std::printf("%s\n", nlohmann::json{{"check", check}, {"ok", ok}, {"skipped", skipped}, {"detail", detail}}.dump().c_str());
  std::fflush(stdout);
}

void figure(const std::string& name, double value, const std::string& unit) {
  std::printf("%s\n", nlohmann::json{{"figure", name}, {"value", value}, {"unit", unit}}.dump().c_str());
  std::fflush(stdout);
}

// n samples of `shape` whose every element is the sample's index, with y = index: any batch can
// be checked against itself on the device.
std::shared_ptr<TensorDataset> numbered(std::int64_t n, std::vector<std::int64_t> shape) {
  std::vector<std::int64_t> full{n};
  full.insert(full.end(), shape.begin(), shape.end());
  std::vector<std::int64_t> ones(shape.size() + 1, 1);
  ones[0] = n;
  at::Tensor x = at::arange(n, at::kFloat).view(ones).expand(full).contiguous();
  at::Tensor y = at::arange(n, at::kLong);
  return std::make_shared<TensorDataset>("numbered", std::vector<std::string>{"x", "y"}, std::vector<at::Tensor>{x, y});
}

std::int64_t cyclesFor(double ms) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return static_cast<std::int64_t>(ms * std::max(khz, 1000000));
}

// The consumer's stream is kept busy (at::cuda::sleep) before it reads each batch, while the
// workers run ahead: a block reused before the consumer's kernels read it, or read before the
// worker's copy landed, shows up as a row that is not its own index.
//
// `poison`: first, memory of the batch blocks' size is freed by the consumer's stream while a fill
// of 0xff (NaN rows) is still queued on it behind a sleep. The caching allocator hands that memory
// to the first batch blocks; a worker that writes them before the fill ran sees its rows clobbered.
void streamRace(const std::string& name, LoaderOptions options, std::vector<std::int64_t> shape, bool poison = false) {
  const std::int64_t n = 4096;
  Loader loader(numbered(n, shape), options, DeviceSpec::parse("cuda:0"));
  if (poison) {
    std::int64_t blockBytes = options.batch_size * static_cast<std::int64_t>(sizeof(float));
    for (auto d : shape) blockBytes *= d;
    at::cuda::sleep(cyclesFor(50.0));
    for (int i = 0; i < 8; ++i)
      at::empty({blockBytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA)).fill_(0xff);
  }
  at::Tensor bad = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  std::vector<at::Tensor> seen, expected;
  const std::int64_t sleep = cyclesFor(2.0);
  bool cpuAhead = false;
  {
    Epoch epoch = loader.epoch(0);
    while (auto batch = epoch.next()) {
      at::cuda::sleep(sleep);
      const at::Tensor x = (*batch)["x"].flatten(1);
      const at::Tensor y = (*batch)["y"].to(at::kFloat);
      bad += (x.amin(1) != y).sum() + (x.amax(1) != y).sum();
      seen.push_back((*batch)["y"].clone());
      expected.push_back(batch->indices);
    }
    at::cuda::CUDAEvent end;
    end.record(at::cuda::getCurrentCUDAStream());
    cpuAhead = !end.query();  // the epoch's last sleeps still queued: the CPU never waited for them
  }
  at::cuda::getCurrentCUDAStream().synchronize();
  const std::int64_t wrong = bad.item<std::int64_t>();
  const bool sameOrder = at::equal(at::cat(seen).cpu(), at::cat(expected));
  report("stream_race_" + name, wrong == 0 && sameOrder,
         std::to_string(wrong) + " wrong rows, samples " + (sameOrder ? "in" : "NOT in") + " the epoch's order");
  if (options.non_blocking || options.loading_mode == LoadingMode::Resident)
    report("async_" + name, cpuAhead,
           cpuAhead ? "next() returned while the consumer's stream still slept"
                    : "the consumer's stream was idle at the epoch's end: next() waited for the GPU");
}

struct PinnedSeen : TelemetryObserver {
  std::int64_t pinned = -1;
  void onRecord(const TelemetryRecord& r) override { pinned = std::max(pinned, r.pinned_bytes); }
};

// The first thing a process does on the GPU: a loader in auto mode asks for the device's memory
// before any CUDA tensor exists (libtorch 2.x sets its allocator up lazily; its statistics then
// refused the device, and `stoker bench --device cuda:0` stopped with "Invalid device argument").
// Runs before every other check.
void firstUseAutoMode() {
  Loader loader(numbered(256, {64}), LoaderOptions::builder().batchSize(32).numWorkers(1).build(),
                DeviceSpec::parse("cuda:0"));
  std::int64_t batches = 0;
  for (const Batch& b : loader.epoch(0)) batches += b.indices.numel() > 0;
  report("first_use_auto_mode", batches == 8 && loader.memory().total > 0,
         std::string(loadingModeName(loader.mode())) + ", " + std::to_string(batches) + " batches, total " +
             std::to_string(loader.memory().total) + " bytes");
}

void memoryFigures() {
  auto observer = std::make_shared<PinnedSeen>();
  LoaderOptions o = LoaderOptions::builder().batchSize(256).numWorkers(2).loadingMode(LoadingMode::Streaming)
                        .pinMemory(true).nonBlocking(true).build();
  Loader loader(numbered(8192, {1024}), o, DeviceSpec::parse("cuda:0"));
  loader.addObserver(observer);
  for (const Batch& b : loader.epoch(0)) (void)b;
  std::size_t freeBytes = 0, totalBytes = 0;
  cudaMemGetInfo(&freeBytes, &totalBytes);
  const DeviceMemory m = loader.memory();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const std::int64_t reserved = stats.reserved_bytes[0].current;
  report("memory_figures", m.total == static_cast<std::int64_t>(totalBytes) && m.reserved == reserved,
         "total " + std::to_string(m.total) + " (cudaMemGetInfo " + std::to_string(totalBytes) + "), reserved " +
             std::to_string(m.reserved) + " (caching allocator " + std::to_string(reserved) + ")");
  report("pinned_in_telemetry", observer->pinned > 0, "pinned_bytes " + std::to_string(observer->pinned));
}

// Auto mode with most of the GPU taken by another tenant: the dataset no longer fits, the loader
// streams, and batches are still right; with the memory back it is resident again.
void autoFallsBackUnderAHog() {
  const auto ds = numbered(512, {1 << 20});  // 2 GiB
  LoaderOptions o = LoaderOptions::builder().batchSize(16).numWorkers(2).build();
  std::size_t freeBytes = 0, totalBytes = 0;
  cudaMemGetInfo(&freeBytes, &totalBytes);
  if (freeBytes < (4ull << 30)) {  // the 2 GiB dataset, its blocks and the 1 GiB left to it must fit
    report("auto_fallback", true, "skipped: " + std::to_string(freeBytes >> 20) + " MiB free, 4 GiB needed", true);
    return;
  }
  LoadingMode hogged, freed;
  bool right = true;
  {
    const std::int64_t hogBytes = static_cast<std::int64_t>(freeBytes) - (1LL << 30);  // leaves 1 GiB
    at::Tensor hog = at::empty({hogBytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    Loader loader(ds, o, DeviceSpec::parse("cuda:0"));
    hogged = loader.mode();
    for (const Batch& b : loader.epoch(0))
      right = right && at::equal(b["x"].select(1, 0).to(at::kLong).cpu(), b.indices);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  {
    Loader loader(ds, o, DeviceSpec::parse("cuda:0"));
    freed = loader.mode();
  }
  report("auto_fallback", hogged == LoadingMode::Streaming && freed == LoadingMode::Resident && right,
         std::string("with 1 GiB free: ") + loadingModeName(hogged) + ", freed: " + loadingModeName(freed) +
             (right ? "" : ", WRONG batches while streaming"));
}

// Several GPUs: the resident dataset reaches the others by one NCCL broadcast, and their batches
// hold the right rows.
void ncclReplication() {
  const int gpus = static_cast<int>(at::cuda::device_count());
  if (gpus < 2) {
    report("nccl_replication", true, "one GPU: the broadcast needs two (checked where there are)", true);
    return;
  }
  std::vector<std::shared_ptr<DeviceBackend>> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(DeviceBackend::create(DeviceSpec{DeviceKind::Cuda, d}));
  LoaderOptions o = LoaderOptions::builder().batchSize(64).numWorkers(2).loadingMode(LoadingMode::Resident).build();
  MultiDeviceLoader loader(numbered(4096, {256}), o, devices);
  bool broadcast = false;
  for (const auto& n : loader.notes()) broadcast |= n.find("one NCCL broadcast") != std::string::npos;
  bool right = true;
  auto epoch = loader.epoch(0);
  while (auto step = epoch.next())
    for (const auto& batches : step->perDevice)
      for (const Batch& b : batches) right = right && at::equal(b["x"].select(1, 0).to(at::kLong).cpu(), b.indices);
  report("nccl_replication", broadcast && right,
         std::string(broadcast ? "replicated by NCCL broadcast" : "NOT replicated by NCCL") +
             (right ? ", every device's batches right" : ", WRONG batches"));
}

// NCCL as the feed's ranks use it, with the one GPU there may be: a group of one rank gathers
// and meets at a barrier over ProcessGroupNCCL.
void ncclOneRank() {
  if (!distAvailable()) {
    report("nccl_one_rank", true, "this build has no c10d (PyTorch's include folder lacked Gloo's headers)", true);
    return;
  }
  DistEnv env;
  env.masterPort = 29400 + static_cast<int>(::getpid() % 500);
  try {
    auto group = DistGroup::connect(env, 60, CollectiveBackend::Nccl, 0);
    const auto got = group->allgather(std::int64_t{42});
    group->barrier();
    report("nccl_one_rank", got == std::vector<std::int64_t>{42} && group->backend() == CollectiveBackend::Nccl,
           "allgather over ProcessGroupNCCL gave " + (got.empty() ? std::string("nothing") : std::to_string(got[0])));
  } catch (const std::exception& e) {
    report("nccl_one_rank", false, e.what());
  }
}

double secondsOf(const std::function<void()>& work) {
  at::cuda::getCurrentCUDAStream().synchronize();
  const auto t0 = Clock::now();
  work();
  at::cuda::getCurrentCUDAStream().synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void bench() {
  const std::int64_t n = 16384, row = 16384;  // 1 GiB of float rows, 64 KiB each
  const auto ds = numbered(n, {row});
  const double bytes = static_cast<double>(n * row * 4);
  for (LoadingMode mode : {LoadingMode::Streaming, LoadingMode::Resident}) {
    LoaderOptions o = LoaderOptions::builder().batchSize(256).numWorkers(4).prefetch(4).loadingMode(mode)
                          .pinMemory(true).nonBlocking(true).build();
    Loader loader(ds, o, DeviceSpec::parse("cuda:0"));
    for (const Batch& b : loader.epoch(0)) (void)b;  // warm: pools, streams
    double best = 1e30;
    for (int r = 0; r < 3; ++r)
      best = std::min(best, secondsOf([&] {
        for (const Batch& b : loader.epoch(r + 1)) (void)b;
      }));
    const std::string what = mode == LoadingMode::Streaming ? "streaming_h2d" : "resident_gather";
    figure(what + "_bytes_per_s", bytes / best, "B/s");
  }
  // The peers: the same bytes by the copy engines alone, in batch-sized pieces.
  const std::int64_t piece = 256 * row * 4;
  at::Tensor pinned = at::empty({piece * 4}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  at::Tensor device = at::empty({piece * 4}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  at::Tensor source = at::empty({static_cast<std::int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  auto stream = at::cuda::getCurrentCUDAStream();
  double h2d = 1e30, d2d = 1e30;
  for (int r = 0; r < 3; ++r) {
    h2d = std::min(h2d, secondsOf([&] {
      for (std::int64_t off = 0; off < static_cast<std::int64_t>(bytes); off += piece)
        cudaMemcpyAsync(device.data_ptr<std::uint8_t>() + (off / piece % 4) * piece,
                        pinned.data_ptr<std::uint8_t>() + (off / piece % 4) * piece, piece, cudaMemcpyHostToDevice,
                        stream.stream());
    }));
    d2d = std::min(d2d, secondsOf([&] {
      for (std::int64_t off = 0; off < static_cast<std::int64_t>(bytes); off += piece)
        cudaMemcpyAsync(device.data_ptr<std::uint8_t>() + (off / piece % 4) * piece, source.data_ptr<std::uint8_t>() + off,
                        piece, cudaMemcpyDeviceToDevice, stream.stream());
    }));
  }
  figure("pinned_memcpy_h2d_bytes_per_s", bytes / h2d, "B/s");
  figure("device_to_device_bytes_per_s", bytes / d2d, "B/s");
}

}  // namespace

int main(int argc, char** argv) {
  const bool benchToo = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  if (!at::hasCUDA() || at::cuda::device_count() == 0) {
    std::printf("no CUDA device visible: skipped\n");
    return 77;
  }
  try {
    firstUseAutoMode();
    auto base = [] { return LoaderOptions::builder().batchSize(64).numWorkers(3).prefetch(4); };
    streamRace("resident", base().loadingMode(LoadingMode::Resident).build(), {4096});
    streamRace("streaming", base().loadingMode(LoadingMode::Streaming).pinMemory(true).nonBlocking(true).build(), {4096});
    streamRace("streaming_blocking",
               base().loadingMode(LoadingMode::Streaming).pinMemory(true).nonBlocking(false).build(), {4096});
    // 4-d samples: channels-last (auto on CUDA) is made on the consumer's stream.
    streamRace("channels_last", base().loadingMode(LoadingMode::Streaming).pinMemory(true).nonBlocking(true).build(),
               {4, 32, 32});
    streamRace("fresh_memory", base().loadingMode(LoadingMode::Streaming).pinMemory(true).nonBlocking(true).build(),
               {4096}, /*poison=*/true);
    streamRace("reuse_buffers", base().loadingMode(LoadingMode::Streaming).nonBlocking(true).reuseBuffers(true).build(),
               {4096});
    memoryFigures();
    autoFallsBackUnderAHog();
    ncclReplication();
    ncclOneRank();
    if (benchToo) bench();
  } catch (const std::exception& e) {
    report("no_exception", false, e.what());
  }
  return failed ? 1 : 0;
}
