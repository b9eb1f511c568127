// data/loader_internal: state shared by loader.cpp (set-up, mode and depth
// choice) and epoch.cpp (workers, the prefetch ring, telemetry). Not a
// public header.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <future>
#include <mutex>

#include "data/buffer_pool.h"
#include "data/loader.h"
#include "data/worker_pool.h"
#include "util/progress.h"

namespace stoker {

using Clock = std::chrono::steady_clock;

struct LoaderCore {
  std::shared_ptr<Dataset> dataset;
  LoaderOptions options;
  std::shared_ptr<DeviceBackend> device;
  std::vector<FieldSpec> fields;
  bool datasetInMemory = false;            // hostFields() is not empty
  int parallelReads = 1;                   // dataset->parallelReads()
  std::vector<std::int64_t> fieldOffsets;  // of each field in a batch block
  std::int64_t blockBytes = 0;             // one full batch, all fields (and the bytes of expanded ones)
  // normalize_on device: per field, the bytes the dataset writes instead and the tables that widen
  // them on the device (image/byte_expansion); empty where every field is read as it is.
  std::vector<std::optional<ByteExpansion>> expansions;
  const ByteExpansion* expansion(std::size_t f) const {
    return f < expansions.size() && expansions[f] ? &*expansions[f] : nullptr;
  }
  std::vector<std::int64_t> bytesOffsets;  // an expanded field's bytes in the batch's block, after the fields
  // Where a streaming read writes each field (in the batch's block on host devices, else in a
  // staging block) and how many bytes a sample: the field's own, or its bytes when expanded.
  std::vector<std::int64_t> readOffsets, readBytes;
  std::int64_t stagingBytes = 0;  // one staging block
  LoadingMode mode = LoadingMode::Streaming;
  std::vector<at::Tensor> resident;        // resident mode: the fields on the device
  std::int64_t residentDeviceBytes = 0;    // what resident fields cost the device (0 when zero-copy)
  // Resident on the host: per field, the dataset's bytes behind it (Dataset::scaledFields), which
  // batches are gathered from instead; empty where none is.
  std::vector<std::optional<ScaledBytes>> residentScaled;
  std::vector<at::Tensor> preplaced;       // fields another loader broadcast onto this device
  // Streaming an in-memory dataset to a device that maps host memory (CUDA, pin_memory): the
  // dataset's fields, gathered by the device straight from host memory (no staging), and what keeps
  // them mapped. Declared before the pools and workers, so it is undone after them.
  std::vector<at::Tensor> mappedFields;
  std::shared_ptr<void> hostMapping;
  std::int64_t mappedBytes = 0;  // of mappedFields: page-locked, reported as pinned_bytes
  // The next epoch's order, drawn while this one runs (Loader::epoch, resident on a device): for
  // large datasets the draw (PyTorch's randperm) costs more than a fast epoch's gathers. Touched
  // by epoch() and retune().
  std::future<std::vector<std::int64_t>> orderAhead;
  std::int64_t orderAheadEpoch = -1;
  // The length of a dataset's own epoch order (WebDataset), counted once: building the order
  // shuffles every sample, and progress asks for it often. Under `mutex`.
  std::optional<std::int64_t> ownOrderLength;
  std::shared_ptr<BufferPool> outputPool;  // batches on the device
  std::shared_ptr<BufferPool> stagingPool; // host staging, streaming to a non-host device
  std::unique_ptr<WorkerPool> workers;
  std::vector<std::shared_ptr<TelemetryObserver>> observers;
  // Set by Loader::setCancelToken while workers (already running the first epoch) poll it.
  std::atomic<const CancelToken*> cancel{nullptr};
  bool cancelled() const {
    const CancelToken* token = cancel.load(std::memory_order_acquire);
    return token && token->cancelled();
  }
  std::string host;
  std::int64_t pid = 0;

  mutable std::mutex mutex;  // guards the members below
  // Telemetry's rank and c10d backend: set by the caller (setTelemetryRank, ...) while workers
  // may be emitting records of the first epoch.
  int rank = 0;
  std::string collectives;
  int depth = 1;
  EpochSummary last;
  std::vector<std::string> notes;
  std::vector<std::string> advice;  // the notes that suggest a change (Loader::advice)
  std::weak_ptr<EpochState> running;
  // An epoch whose consumer is done while its workers already make the next epoch's batches
  // (Epoch::queueNext): the next epochOver() serving that order adopts it, anything else stops
  // it. Held here because its Epoch may be gone; the Loader's destructor stops it.
  std::shared_ptr<EpochState> pending;
  // ~Loader ran while an epoch lived on: a state handed over after it would never be adopted, and
  // pending <-> state.core would keep the core and its parked workers alive for good.
  bool loaderGone = false;

  void note(const std::string& text);
  // Resident mode: field f's rows `indices` into `out`, widened from the dataset's bytes where the
  // host holds them (residentScaled), else gathered by the device.
  void gatherResident(std::size_t f, const std::int64_t* indices, std::int64_t count, void* out) const;
  DeviceMemory memory() const;
};

// What Batch::recordStream needs: the batch's block (while anything holds it) and its device.
struct BatchStreams {
  std::weak_ptr<BufferLease> block;
  std::shared_ptr<DeviceBackend> device;
};

enum class Stage : int { Idle, Reading, Gathering, Copying, Transforming };
const char* stageName(Stage s);

struct WorkerStatus {
  std::atomic<std::int64_t> batch{-1};
  std::atomic<int> stage{0};
  std::atomic<std::int64_t> sample{-1};
};

// A batch as a worker hands it over.
struct Produced {
  std::int64_t index = -1;  // -1: the slot is empty
  std::optional<Batch> batch;
  std::exception_ptr error;
  std::shared_ptr<BufferLease> output;   // the batch's block (reuse mode: held by the epoch until the next batch)
  std::shared_ptr<BufferLease> staging;  // non_blocking=false: copied on the consumer's thread
  std::shared_ptr<DeviceFence> ready;    // the worker's copy or gather queued on the device (CUDA)
  double latencyMs = 0;
  std::array<double, 5> stages{};  // seconds per kTelemetryStages entry; all 0 when not measured
  bool staged = false;             // stages were measured (streaming)
  std::int64_t skipped = 0;        // bad samples left out of this batch
  std::string skipReason;          // the first one's error
};

// The rolling window behind telemetry records.
struct TelemetryWindow {
  Clock::time_point start;
  std::int64_t batches = 0, samples = 0, bytes = 0;
  // The window before this one: an epoch's end flushes however short a window it has, and its
  // rate is then taken over both (see emit in epoch.cpp).
  Clock::time_point previousStart;
  std::int64_t previousSamples = -1, previousBytes = 0;
  double waitSeconds = 0, stepSeconds = 0;
  std::int64_t readySum = 0;
  std::vector<double> latenciesMs;
  std::array<double, 5> stages{};  // summed seconds per kTelemetryStages entry
  std::int64_t stagedBatches = 0;
};

// One epoch's order within an EpochState. Batch b of the state (numbered on across epochs, so
// the ring and the workers run on from one epoch into the next) is this segment's batch
// b - firstBatch: order[batchBegin[b - firstBatch], batchBegin[b - firstBatch + 1]). A fed epoch
// (Loader::openEpoch) has one segment whose vectors grow while it runs; their capacity is
// reserved up front so workers can read them without reallocation.
struct EpochSegment {
  std::int64_t epoch = 0;
  std::int64_t firstBatch = 0;
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> batchBegin;
  bool samplerOrder = false;  // the sampler's (or the dataset's own) order for `epoch`
  bool fed = false;           // fed as it runs (Epoch::queueNextFed): Loader::openEpoch adopts it
};

struct EpochState {
  std::shared_ptr<LoaderCore> core;
  std::int64_t epoch = 0;         // the consumer's epoch (the segment starting at segmentFirst)
  std::int64_t segmentFirst = 0;  // its first batch
  // Bumped when the next epoch's consumer adopts this state: the previous epoch's Epoch object
  // then reads as over and its destructor leaves the workers running.
  std::atomic<std::int64_t> generation{0};
  bool fed = false;
  bool feedOpen = false;  // of the last segment: feed() goes there (a queued fed epoch, once there is one)
  bool handedOver = false;  // the consumer's epoch is over, the next one's batches are being made
  std::int64_t batchCount = 0;  // over all segments: what workers may claim
  int depth = 1;
  int workerCount = 0;

  std::mutex mutex;  // guards segments (the vectors of a fed one), batchCount and what follows
  std::vector<std::shared_ptr<EpochSegment>> segments;  // the consumer's epoch, then a queued one
  // Loader::epoch with persistent_workers: the sampler's order for the next epoch, drawn on a
  // thread of its own (a randperm of the dataset) and queued by next() once it is there.
  std::future<std::vector<std::int64_t>> nextOrder;
  std::int64_t nextOrderEpoch = -1;
  std::condition_variable workCv, readyCv;
  // The batch the consumer sleeps on readyCv for (-1: it does not): a worker wakes it only with
  // that batch, not with each one it makes.
  std::int64_t consumerSleepsFor = -1;
  std::int64_t nextClaim = 0;
  std::int64_t consumed = 0;
  std::vector<Produced> slots;
  bool stopped = false;   // workers must stop
  bool finished = false;  // the summary is recorded
  std::unique_ptr<WorkerStatus[]> status;

  std::shared_ptr<BufferLease> heldForReuse;
  bool started = false;
  Clock::time_point firstAsk, lastReturn;
  // Epoch::waitReady for batch `waitingFor` began at `waitingSince`: next() counts the data wait
  // from there (consumer thread only).
  std::int64_t waitingFor = -1;
  Clock::time_point waitingSince;
  double waitTotal = 0;
  std::int64_t samples = 0, bytes = 0;
  std::array<double, 5> stageTotals{};
  std::int64_t stagedBatches = 0, skipped = 0;
  std::string firstSkipped;
  TelemetryWindow window;
};

// The segment holding batch b (under s.mutex).
const std::shared_ptr<EpochSegment>& segmentOf(const EpochState& s, std::int64_t b);
// Where the consumer's epoch ends: the first batch of a queued epoch, else batchCount (under s.mutex).
std::int64_t consumerEnd(const EpochState& s);
// Whether an epoch is queued behind the consumer's (under s.mutex). A queued fed epoch may have no
// batch yet, so this is not consumerEnd(s) < batchCount.
inline bool hasQueuedEpoch(const EpochState& s) { return s.segments.size() > 1; }
// Whether the consumer's own epoch may still be fed (under s.mutex).
inline bool consumerFeedOpen(const EpochState& s) { return s.feedOpen && !hasQueuedEpoch(s); }
// Error(BadInput) naming the first index of `order` outside the dataset's samples.
void checkOrder(const Dataset& dataset, const std::vector<std::int64_t>& order);
// Batch boundaries of an order of n samples: batch_size batches (drop_last as the options say), or
// the given per-step sizes (each 1 to batch_size, summing to n). Throws Error(BadInput).
std::vector<std::int64_t> batchBoundaries(std::int64_t n, const LoaderOptions& o, const std::vector<std::int64_t>& sizes);
// Queues `segment` (its epoch, order, batchBegin and samplerOrder set) behind the consumer's
// epoch; false where Epoch::queueNext says it queues nothing.
bool queueSegment(EpochState& s, std::shared_ptr<EpochSegment> segment);
// Stops the workers of a state no epoch will adopt (LoaderCore::pending), without a summary.
void discardPending(LoaderCore& c);

// Produces batch `b` of the epoch (epoch.cpp). Past `deadline` (checked
// after each sample) it throws Error(Timeout) naming the stage.
Produced produceBatch(EpochState& s, std::int64_t b, WorkerStatus& status,
                      Clock::time_point deadline = Clock::time_point::max());
// The body every worker thread runs during an epoch (epoch.cpp).
void workerLoop(const std::shared_ptr<EpochState>& state, int worker);

}  // namespace stoker
