// data/loader: the loader a training program links, `stoker bench` measures
// and the workbench tunes. Follows flodl's DataLoader (resident and
// streaming modes chosen by probing device memory, OOM fallback, prefetch
// depth re-sized per epoch under vram_max_usage, named batch fields) with a
// pool of workers, pooled staging buffers and copies fenced per batch.
//
//   auto loader = stoker::Loader(dataset, options, DeviceSpec::parse("cuda:0"));
//   for (const stoker::Batch& batch : loader.epoch(e)) train(batch["images"]);
//
// resident:  the dataset's fields live on the device; each epoch the sampler's
//            order is gathered batch by batch (index_select on CUDA, row
//            copies elsewhere) into pooled output buffers.
// streaming: workers read samples into staging buffers from a pool and copy
//            them to the device; a ring of `depth` batches bounds memory.
// Only one epoch runs at a time; dropping it stops the workers cleanly. The next
// epoch's batches can be made before this one ends (Epoch::queueNext).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/device.h"
#include "data/loader_options.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class CancelToken;
struct EpochState;
struct LoaderCore;

struct Batch {
  std::int64_t epoch = 0;
  std::int64_t index = 0;  // batch number within the epoch
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  at::Tensor indices;      // the samples in this batch (int64, host)
  // reuse_buffers: the pooled block the tensors view, which the epoch holds until the next batch
  // and then hands out again unless someone else holds it. A consumer that keeps the tensors
  // longer (the Python binding: a script may keep any batch) locks it before that. Empty
  // otherwise: the tensors hold the block themselves.
  std::weak_ptr<void> buffers;
  // The stream rule (CUDA). A batch is ready on the stream current when next() returned it, and its
  // memory is reused only after the work queued there on it. Work on another stream must first wait
  // for the current one (as for any tensor), and the batch must be recorded on that stream, once it
  // is queued there and before the batch is dropped: recordStream(s), like Tensor.record_stream(s).
  // Host devices have nothing to order (it returns at once); a stream of another device is refused.
  void recordStream(const c10::Stream& stream) const;
  std::shared_ptr<struct BatchStreams> streams;  // set by next() on a device (data/loader_internal.h)

  std::int64_t size() const { return tensors.empty() ? 0 : tensors[0].size(0); }
  std::int64_t nbytes() const;
  // Throws Error(BadInput) listing the fields when `name` is not one.
  const at::Tensor& operator[](std::string_view name) const;
};

struct EpochSummary {
  std::int64_t epoch = -1;
  std::int64_t batches = 0;
  std::int64_t samples = 0;
  std::int64_t bytes = 0;
  double seconds = 0;       // first next() to the end of the epoch
  double waitSeconds = 0;   // of which the consumer waited for data
  int depth = 0;
  LoadingMode mode = LoadingMode::Streaming;
  bool completed = false;
  // Worker seconds by stage over the epoch's batches (kTelemetryStages: read, decode, transform,
  // collate, copy); empty in resident mode, where a batch is one gather.
  std::map<std::string, double> stageSeconds;
  std::int64_t skipped = 0;   // bad samples left out (skip_bad_samples)
  std::string firstSkipped;   // why the first one was
};

class Epoch {
 public:
  Epoch(Epoch&&) noexcept;
  Epoch& operator=(Epoch&&) = delete;
  ~Epoch();  // stops the workers, waits for them, records the summary

  // The next batch, or nullopt after the last. Rethrows a worker's error
  // (naming the batch and sample), Error(Timeout) naming the stalled stage,
  // Error(Cancelled) when the loader's cancel token fires.
  std::optional<Batch> next();
  std::int64_t batches() const;  // so far, for a fed epoch
  // The indices this epoch serves, in order: the sampler's (or the dataset's own) whole order, or
  // what was fed so far. Empty once the epoch has ended. A copy: the workers read the original.
  std::vector<std::int64_t> order() const;
  // Waits up to `wait` for the next batch; true once next() would not wait for another thread
  // (the batch is ready, the epoch is over or failed, or the caller would produce it itself).
  // Lets a caller that must stay responsive (a Python thread checking for Ctrl-C) wait in
  // slices; the data-wait time in telemetry counts from the first call for a batch.
  bool waitReady(std::chrono::milliseconds wait);
  void stop();

  // Queues epoch `e` serving `order` (batches as Loader::epochOver cuts them) behind this one:
  // workers that run out of this epoch's batches make the next one's, within the same prefetch
  // ring, so that its first batches are ready when this epoch ends (no gap at the boundary).
  // Once this epoch is over, Loader::epochOver(e, the same order, the same sizes) -- or
  // Loader::epoch(e) when the order is the sampler's -- adopts them; any other epoch start, a
  // retune or the Loader's end drops them. False (nothing queued) for a fed epoch, without
  // workers, or when one is queued already. Throws Error(BadInput) as epochOver does.
  bool queueNext(std::int64_t e, std::vector<std::int64_t> order, const std::vector<std::int64_t>& batchSizes = {});
  // The same for a fed epoch whose feed is closed: epoch `e` is queued behind it as a fed epoch of
  // room for `capacity` indices, and feed() / closeFeed() now go to it, so its first batches are
  // made before this epoch ends. Once this epoch is over, Loader::openEpoch(e, ...) adopts it, fed
  // and feeding on. False (nothing queued) for an epoch not fed, still open for feeding, without
  // workers, or with one queued already.
  bool queueNextFed(std::int64_t e, std::int64_t capacity);

  // A fed epoch (Loader::openEpoch) serves the batches given here, in
  // order: `count` indices cut into batches of `batchSize` (the last may be
  // shorter; batchSize <= the loader's batch_size). Throws Error(BadInput)
  // for indices out of range, a closed feed or more than the capacity.
  void feed(const std::int64_t* indices, std::int64_t count, std::int64_t batchSize);
  // No more batches: next() returns nullopt once the fed ones are served.
  void closeFeed();

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;
    explicit iterator(Epoch* e) : epoch_(e) { advance(); }
    iterator() = default;
    const Batch& operator*() const { return *current_; }
    const Batch* operator->() const { return &*current_; }
    iterator& operator++() { advance(); return *this; }
    bool operator==(const iterator& o) const { return !current_ && !o.current_; }
    bool operator!=(const iterator& o) const { return !(*this == o); }

   private:
    void advance() { current_ = epoch_ ? epoch_->next() : std::nullopt; if (!current_) epoch_ = nullptr; }
    Epoch* epoch_ = nullptr;
    std::optional<Batch> current_;
  };
  iterator begin() { return iterator(this); }
  iterator end() { return iterator(); }

 private:
  friend class Loader;
  explicit Epoch(std::shared_ptr<EpochState> state);
  bool live() const;  // the state still serves this epoch (not adopted by the next one)
  std::shared_ptr<EpochState> state_;
  std::int64_t generation_ = 0;
};

// A dataset that produces samples on demand, read once into host memory in
// parallel (what resident mode does at every Loader's start); in-memory
// datasets come back as they are. The auto-tuner uses it so its trials do
// not each pay the decode.
std::shared_ptr<Dataset> decodeOnce(std::shared_ptr<Dataset> dataset, int threads, const CancelToken* cancel);

// Workers that a dataset whose batches wait on the network gets when the user does not choose,
// and below which the loader notes that few of them wait: they are threads, and far from the
// server each one adds a batch a round trip (uncached remote token windows, 64 x 1024, at 50 ms on
// 2 cores: 3,682 windows/s with 2, 19,475 with 16, 41,272 with 64).
inline constexpr int kWorkersForNetwork = 16;
// What such workers' batches may hold, three a worker (its own and two in the ring): the bound on
// workers for large batches, here and in the auto-tuner.
inline constexpr std::int64_t remoteWorkerBytes = 2LL << 30;
// kWorkersForNetwork, fewer where their batches of `batchBytes` would pass remoteWorkerBytes; at least 1.
int workersForNetwork(std::int64_t batchBytes);

class Loader {
 public:
  // Validates the options, opens the device, chooses the mode (auto probes
  // memory; resident falls back to streaming on out-of-memory in auto mode)
  // and, when resident, moves the dataset to the device. `cancel` is polled
  // while a resident dataset is decoded (Error(Cancelled)) and stays the
  // loader's token (setCancelToken).
  Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options, DeviceSpec device = {}, SimDeviceConfig sim = {});
  // `residentOnDevice`: the dataset's fields already on `device` (a broadcast from another
  // device's loader); unless loading_mode is streaming the loader is resident on them.
  Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options, std::shared_ptr<DeviceBackend> device,
         const CancelToken* cancel = nullptr, std::vector<at::Tensor> residentOnDevice = {});
  ~Loader();
  Loader(Loader&&) noexcept;
  Loader& operator=(Loader&&) = delete;

  void addObserver(std::shared_ptr<TelemetryObserver> observer);
  // Polled by workers and next(); a cancelled token ends the epoch with Error(Cancelled).
  void setCancelToken(const CancelToken* token);
  // Rank reported in telemetry (default: shard_rank).
  void setTelemetryRank(int rank);
  // The c10d backend of the job this loader feeds ("nccl", "gloo"), reported in telemetry.
  void setTelemetryCollectives(const std::string& backend);

  // Applies the knobs that can change between two batches -- num_workers,
  // prefetch, auto_tune, pin_memory, non_blocking, reuse_buffers,
  // enable_transforms, generator_seed, memory_format, timeout,
  // persistent_workers, collate_buffer_size, telemetry_interval_ms,
  // worker_id -- from `next`, between epochs (a running one is an error).
  // Throws Error(BadInput) naming the first other knob that differs: those
  // change the sample order or the dataset's layout and need a new Loader.
  void retune(const LoaderOptions& next);
  // For a caller whose user did not choose num_workers (Python without num_workers=, `stoker
  // bench` and `stoker feed` without --workers or a setting that names it): a streamed dataset
  // whose batches wait on the network (Dataset::batchWaitsOnNetwork) gets workersForNetwork(its
  // batch) workers, and a ring of at least `batchesPerWorker` batches a worker (at least 8; 0
  // keeps the ring: its user chose the depth); a note says why. Meant before the first epoch:
  // it is a retune (a running epoch is an error, a queued one is dropped). False, with nothing
  // changed, for any other dataset or mode, or when it has that many workers already.
  bool raiseWorkersForNetwork(int batchesPerWorker = 2);
  // The workers raiseWorkersForNetwork would give this loader (workersForNetwork of its batch), 0
  // when its batches do not wait on the network: what the bottleneck panel advises.
  int networkWorkers() const;

  // Starts epoch `e` (re-sizes the prefetch depth first). Throws
  // Error(BadInput) while another epoch of this loader is still alive.
  // Lookahead::NextEpoch (with persistent_workers and workers): epoch e + 1's order is drawn on a
  // thread meanwhile and queued (Epoch::queueNext), so the workers make its first batches before
  // this epoch ends, and epoch(e + 1) starts with them ready -- no gap at the boundary, but the
  // prefetch depth is not re-sized then and the queued batches hold their buffers until that
  // epoch (or anything else) starts. For loops that run epoch after epoch.
  enum class Lookahead { Off, NextEpoch };
  Epoch epoch(std::int64_t e, Lookahead lookahead = Lookahead::Off);
  // Starts epoch `e` serving `order` (sample indices, e.g. what is left of an interrupted epoch)
  // in batches of batch_size, the last one dropped or short as drop_last says -- or in batches of
  // `batchSizes` (a plan's per-step sizes for unequal GPUs; each at most batch_size, summing to the
  // order's length). Transforms draw as they would in epoch `e`. Throws Error(BadInput) for an
  // index out of range or sizes that do not fit.
  Epoch epochOver(std::int64_t e, std::vector<std::int64_t> order, const std::vector<std::int64_t>& batchSizes = {});
  // Starts epoch `e` with no order of its own: the caller feeds it batch by
  // batch (Epoch::feed) up to `capacity` samples. The multi-device loader
  // feeds each device the slices the plan gives it. Adopts the fed epoch `e` the previous epoch
  // queued (Epoch::queueNextFed, with room for `capacity`): its batches fed so far are made already.
  Epoch openEpoch(std::int64_t e, std::int64_t capacity);
  // The samples `indices` as one batch on this loader's device, now
  // (gathered on the device when resident, read and copied otherwise).
  Batch fetch(const std::vector<std::int64_t>& indices, std::int64_t epoch = 0) const;

  LoadingMode mode() const;
  // Resident mode: the dataset's fields on the device (empty when streaming).
  const std::vector<at::Tensor>& residentFields() const;
  int prefetchDepth() const;  // of the last epoch started
  std::int64_t batchesPerEpoch() const;
  // Samples an epoch hands out: the sampler's count, less the partial batch
  // drop_last drops.
  std::int64_t samplesPerEpoch() const;
  const LoaderOptions& options() const;
  const Dataset& dataset() const;
  DeviceBackend& device() const;
  DeviceMemory memory() const;  // device figures with this loader's pools folded in
  EpochSummary lastEpoch() const;
  // How the mode and depth were chosen, and fallbacks, in words.
  std::vector<std::string> notes() const;
  // The notes that suggest a change the user may want (few workers for a dataset whose batches wait
  // on the network, a remote WebDataset downloaded to scan it): Python warns with them.
  std::vector<std::string> advice() const;
  std::int64_t poolAllocations() const;  // buffer blocks ever allocated (leak and reuse tests)

 private:
  std::int64_t sampledPerEpoch() const;  // the sampler's count for this rank
  Epoch startEpoch(std::int64_t e, std::vector<std::int64_t> order, std::vector<std::int64_t> batchBegin, bool fed);
  std::shared_ptr<LoaderCore> core_;
};

}  // namespace stoker
