// data/epoch: one epoch of a Loader. Workers claim batch numbers in order,
// produce them into pooled buffers and park them in a ring of `depth` slots;
// the consumer takes them in order. A worker never runs more than `depth`
// batches ahead of the consumer, which bounds memory. A queued next epoch
// (Epoch::queueNext) continues the batch numbers, so workers run on into it
// within the same ring while the consumer finishes this one.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "data/loader_internal.h"
#include "net/http_transfer.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {
namespace {

// Thrown inside a worker when the epoch was stopped mid-batch.
struct EpochStopped {};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool stopRequested(EpochState& s) {
  if (s.core->cancelled()) return true;
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stopped;
}

// Random horizontal flip per sample, seeded by (generator_seed, epoch, sample)
// so the result does not depend on which worker made the batch.
void flipSamples(at::Tensor& t, const std::int64_t* indices, std::int64_t count, std::uint64_t seed, std::int64_t epoch) {
  for (std::int64_t i = 0; i < count; ++i) {
    std::seed_seq seq{seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(indices[i])};
    std::mt19937 rng(seq);
    if (rng() & 1u) {
      at::Tensor row = t[i];
      row.copy_(row.flip({-1}));
    }
  }
}

// Whether 4-d fields go channels-last (finishOnDevice), read when a batch is made and handed over.
bool channelsLast(const LoaderCore& c) {
  const MemoryFormat fmt = c.options.memory_format;
  return fmt == MemoryFormat::Nhwc || (fmt == MemoryFormat::Auto && c.device->kind() == DeviceKind::Cuda);
}

// How field f crosses as bytes (normalize_on device); null when as it is. Resident batches are
// gathered as the fields are stored, whatever was chosen before the mode.
const ByteExpansion* expansionOf(const LoaderCore& c, std::size_t f) {
  return c.mode == LoadingMode::Resident ? nullptr : c.expansion(f);
}

// The expanded fields of `count` samples widened from their bytes in the batch's block (queued on
// the device after what this thread queued before; done on return on host devices).
void widenFields(LoaderCore& c, std::uint8_t* block, std::int64_t count) {
  for (std::size_t f = 0; f < c.fields.size(); ++f)
    if (const ByteExpansion* e = expansionOf(c, f))
      c.device->expandBytes(*e, block + c.bytesOffsets[f], count, channelsLast(c), block + c.fieldOffsets[f]);
}

at::Tensor viewField(LoaderCore& c, std::size_t f, std::uint8_t* data, std::int64_t count,
                     const std::shared_ptr<BufferLease>& lease, bool keepLease) {
  std::vector<std::int64_t> shape{count};
  shape.insert(shape.end(), c.fields[f].sampleShape.begin(), c.fields[f].sampleShape.end());
  auto options = at::TensorOptions().dtype(c.fields[f].dtype).device(c.device->torchDevice());
  // A field widened on the device was written channels-last already when the batch goes so.
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<std::int64_t>(shape[d], 1);
  if (expansionOf(c, f) && shape.size() == 4 && channelsLast(c)) strides = c10::get_channels_last_strides_2d(shape);
  // The device named (target_device), not asked of the driver: without it from_blob queries the
  // pointer (cudaPointerGetAttributes) for every field of every batch.
  const at::Device device = options.device();
  if (keepLease) return at::from_blob(data, shape, strides, [lease](void*) {}, options, device);
  return at::from_blob(data, shape, strides, [](void*) {}, options, device);  // reuse mode: the epoch holds the lease
}

// The staged fields to the device (each as the dataset wrote it), then the expanded ones widened
// there from their bytes: both queued on the device in that order.
void copyBlock(LoaderCore& c, std::uint8_t* dst, const std::uint8_t* src, std::int64_t count) {
  for (std::size_t f = 0; f < c.fields.size(); ++f) {
    const std::int64_t to = expansionOf(c, f) ? c.bytesOffsets[f] : c.fieldOffsets[f];
    c.device->copyToDevice(dst + to, src + c.readOffsets[f], count * c.readBytes[f], c.options.pin_memory);
  }
  widenFields(c, dst, count);
}

std::string describeStall(EpochState& s, std::int64_t b) {
  for (int w = 0; w <= s.workerCount; ++w) {  // the last status is the consumer's own
    WorkerStatus& st = s.status[w];
    if (st.batch.load() != b) continue;
    std::string text = std::string("stalled in ") + stageName(static_cast<Stage>(st.stage.load())) + " on " +
                       (w == s.workerCount ? std::string("the consumer's thread") : "worker " + std::to_string(w));
    const std::int64_t sample = st.sample.load();
    if (sample >= 0) text += " at sample " + std::to_string(sample);
    return text;
  }
  return "queued: no worker has started it (all " + std::to_string(s.workerCount) + " busy with earlier batches)";
}

void emit(EpochState& s, Clock::time_point now, bool epochEnd) {
  LoaderCore& c = *s.core;
  std::vector<std::shared_ptr<TelemetryObserver>> observers;
  int rank = 0;
  std::string collectives;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    observers = c.observers;
    rank = c.rank;
    collectives = c.collectives;
  }
  TelemetryWindow& w = s.window;
  if (!observers.empty()) {
    TelemetryRecord r;
    r.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    r.host = c.host;
    r.pid = c.pid;
    r.rank = rank;
    r.worker = c.options.worker_id;
    r.device = c.device->name();
    r.epoch = s.epoch;
    std::int64_t end;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      end = consumerEnd(s);
    }
    r.step = s.consumed - s.segmentFirst;
    r.steps_total = end - s.segmentFirst;
    double span = seconds(now - w.start);
    double samples = static_cast<double>(w.samples), bytes = static_cast<double>(w.bytes);
    // An epoch's end flushes its window however short: often the last batch alone, counted just
    // after the previous record, which over microseconds read as 438,000 samples/s on a loader
    // doing 170 (a spike in every plot). A window under a quarter of the interval is taken
    // together with the one before it.
    if (epochEnd && w.previousSamples >= 0 && span * 4e3 < c.options.telemetry_interval_ms) {
      span = seconds(now - w.previousStart);
      samples += static_cast<double>(w.previousSamples);
      bytes += static_cast<double>(w.previousBytes);
    }
    span = std::max(1e-9, span);
    r.samples_per_s = samples / span;
    r.bytes_per_s = bytes / span;
    if (!w.latenciesMs.empty()) {
      std::sort(w.latenciesMs.begin(), w.latenciesMs.end());
      auto pick = [&w](double q) {
        return w.latenciesMs[std::min(w.latenciesMs.size() - 1, static_cast<std::size_t>(q * static_cast<double>(w.latenciesMs.size())))];
      };
      r.batch_latency_p50_ms = pick(0.5);
      r.batch_latency_p99_ms = pick(0.99);
    }
    const double batches = static_cast<double>(std::max<std::int64_t>(w.batches, 1));
    r.data_wait_ms = 1e3 * w.waitSeconds / batches;
    r.step_ms = 1e3 * w.stepSeconds / batches;
    r.prefetch_depth = s.depth;
    r.ready = static_cast<int>(static_cast<double>(w.readySum) / batches + 0.5);
    r.mode = loadingModeName(c.mode);
    r.source = "stoker";
    r.collectives = std::move(collectives);
    const DeviceMemory m = c.memory();
    r.mem_used = m.used;
    r.mem_reserved = m.reserved;
    r.mem_allocated = m.allocated;
    r.mem_total = m.total;
    // Page-locked staging, and a dataset's host memory mapped for the device to gather from: only
    // a CUDA backend pins (the others have no use for it).
    const bool pins = c.options.pin_memory && c.device->kind() == DeviceKind::Cuda;
    // Staging blocks as the allocator holds them (PyTorch's caching allocator rounds each up to a
    // power of two; blocks locked in place are their own size).
    const std::int64_t staged =
        c.stagingPool ? c.stagingPool->reservedBlocks() * c.device->heldHostBytes(c.stagingPool->blockBytes(), true) : 0;
    r.pinned_bytes = pins ? staged + c.mappedBytes : 0;
    if (const NetCounters& net = netCounters(); net.requests > 0) {  // a remote dataset (or other remote reads) in this process
      r.net_requests = static_cast<std::int64_t>(net.requests.load());
      r.net_bytes = static_cast<std::int64_t>(net.bytes.load());
      r.net_retries = static_cast<std::int64_t>(net.retries.load());
    }
    r.epoch_end = epochEnd;
    if (w.stagedBatches > 0)
      for (std::size_t k = 0; k < w.stages.size(); ++k)
        r.stages_ms[kTelemetryStages[k]] = 1e3 * w.stages[k] / static_cast<double>(w.stagedBatches);
    for (auto& o : observers) o->onRecord(r);
  }
  TelemetryWindow next;
  next.start = now;
  next.previousStart = w.start;
  next.previousSamples = w.samples;
  next.previousBytes = w.bytes;
  w = std::move(next);
}

// The consumer's epoch as EpochSummary (LoaderCore::last), and its last telemetry record.
void recordSummary(EpochState& s, bool completed) {
  const auto now = Clock::now();
  EpochSummary sum;
  sum.epoch = s.epoch;
  sum.batches = s.consumed - s.segmentFirst;
  sum.samples = s.samples;
  sum.bytes = s.bytes;
  sum.seconds = s.started ? seconds(now - s.firstAsk) : 0;
  sum.waitSeconds = s.waitTotal;
  sum.depth = s.depth;
  sum.mode = s.core->mode;
  sum.completed = completed;
  if (s.stagedBatches > 0)
    for (std::size_t k = 0; k < s.stageTotals.size(); ++k) sum.stageSeconds[kTelemetryStages[k]] = s.stageTotals[k];
  sum.skipped = s.skipped;
  sum.firstSkipped = s.firstSkipped;
  if (s.started) emit(s, now, true);
  std::lock_guard<std::mutex> lock(s.core->mutex);
  s.core->last = sum;
}

// Stops the workers, waits for them and records the summary (once).
void finishEpoch(EpochState& s, bool completed) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.finished) return;
    s.stopped = true;
  }
  s.workCv.notify_all();
  if (s.core->workers) s.core->workers->join();
  recordSummary(s, completed);
  std::vector<Produced> leftover;  // freed after the lock is released (declared before it)
  std::lock_guard<std::mutex> lock(s.mutex);
  leftover.swap(s.slots);
  s.heldForReuse.reset();
  s.finished = true;
}

}  // namespace

const char* stageName(Stage s) {
  switch (s) {
    case Stage::Idle: return "idle";
    case Stage::Reading: return "reading samples";
    case Stage::Gathering: return "gathering on the device";
    case Stage::Copying: return "copying to the device";
    case Stage::Transforming: return "transforming";
  }
  return "?";
}

const std::shared_ptr<EpochSegment>& segmentOf(const EpochState& s, std::int64_t b) {
  for (auto it = s.segments.rbegin(); it != s.segments.rend(); ++it)
    if ((*it)->firstBatch <= b) return *it;
  return s.segments.front();
}

std::int64_t consumerEnd(const EpochState& s) {
  // segments[0] is the consumer's epoch (adoption drops those before it); it may be empty.
  return hasQueuedEpoch(s) ? s.segments[1]->firstBatch : s.batchCount;
}

Produced produceBatch(EpochState& s, std::int64_t b, WorkerStatus& status, Clock::time_point deadline) {
  LoaderCore& c = *s.core;
  const auto start = Clock::now();
  // With num_workers=0 the batch is made on the consumer's thread, so no one
  // else can watch it: it checks the timeout itself after every sample (a
  // sample that never returns cannot be interrupted on its own thread).
  auto checkDeadline = [&] {
    if (Clock::now() <= deadline) return;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", c.options.timeout);
    throw Error(ErrorKind::Timeout, "", std::string("not ready after timeout ") + limit + " s: " + describeStall(s, b));
  };
  std::shared_ptr<EpochSegment> segment;  // kept: the consumer may drop it from the state meanwhile
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    segment = segmentOf(s, b);
  }
  const auto local = static_cast<std::size_t>(b - segment->firstBatch);
  const std::int64_t begin = segment->batchBegin[local];
  std::int64_t count = segment->batchBegin[local + 1] - begin;
  const std::int64_t* idx = segment->order.data() + begin;
  const std::int64_t epoch = segment->epoch;
  const bool reuse = c.options.reuse_buffers;
  status.batch.store(b);
  status.sample.store(-1);

  Produced p;
  p.index = b;
  Batch batch;
  batch.epoch = epoch;
  batch.index = b - segment->firstBatch;
  batch.indices = at::empty({count}, at::kLong);
  std::copy(idx, idx + count, batch.indices.data_ptr<std::int64_t>());
  std::shared_ptr<BufferLease> out = c.outputPool->acquire();

  // Resident fields on the device, or an in-memory dataset the device reads in host memory
  // (streaming, mapped): either way the device gathers the batch itself, all fields in one call.
  const bool mapped = c.mode != LoadingMode::Resident && !c.mappedFields.empty();
  if (c.mode == LoadingMode::Resident || mapped) {
    status.stage.store(static_cast<int>(mapped ? Stage::Copying : Stage::Gathering));
    const std::int64_t n = c.dataset->size();
    for (std::int64_t i = 0; i < count; ++i)
      if (idx[i] < 0 || idx[i] >= n)
        throwBadInput("sample " + std::to_string(idx[i]), "out of range for " + std::to_string(n) + " samples");
    std::vector<std::uint8_t*> outs(c.fields.size());
    for (std::size_t f = 0; f < c.fields.size(); ++f) outs[f] = out->data() + c.fieldOffsets[f];
    if (!mapped && !c.residentScaled.empty())  // resident on the host, some fields from their bytes
      for (std::size_t f = 0; f < c.fields.size(); ++f) c.gatherResident(f, idx, count, outs[f]);
    else
      c.device->gatherBatch(mapped ? c.mappedFields : c.resident, idx, count, outs);
    p.ready = c.device->fenceQueuedWork();
    out->fenceRelease(p.ready);  // a batch dropped unseen: its block waits for the gather
    checkDeadline();
  } else {
    std::shared_ptr<BufferLease> staging = c.device->isHost() ? out : c.stagingPool->acquire();
    status.stage.store(static_cast<int>(Stage::Reading));
    // Datasets that produce samples on demand are read one sample at a time
    // so a stall or an error can name its sample; in-memory ones in one go, and so are remote
    // ones that fetch a batch's samples in parallel (their errors still name the sample), unless
    // skip_bad_samples needs each sample on its own.
    const bool wholeBatch = c.datasetInMemory || (c.parallelReads > 1 && !c.options.skip_bad_samples);
    const std::int64_t step = wholeBatch ? count : 1;
    const bool skipBad = c.options.skip_bad_samples && step == 1;
    std::vector<std::uint8_t*> dst(c.fields.size());
    StageSeconds stages;
    const ReadContext context{c.options.generator_seed, epoch, &stages, !c.expansions.empty()};  // streaming only
    std::int64_t kept = 0;  // samples in the block so far (skip_bad_samples leaves bad ones out)
    std::int64_t* keptIndices = batch.indices.data_ptr<std::int64_t>();
    const auto readStart = Clock::now();
    for (std::int64_t i = 0; i < count; i += step) {
      if (step == 1 && stopRequested(s)) throw EpochStopped{};
      status.sample.store(idx[i]);
      for (std::size_t f = 0; f < c.fields.size(); ++f)
        dst[f] = staging->data() + c.readOffsets[f] + kept * c.readBytes[f];
      const std::int64_t n = std::min(step, count - i);
      try {
        c.dataset->readSamples(idx + i, n, dst.data(), context);
      } catch (const Error& e) {
        // A sample that cannot be read or decoded is skipped; a network that failed is not (every
        // later sample would be lost the same way): ErrorKind::Network stops the epoch.
        if (!skipBad || (e.kind() != ErrorKind::BadInput && e.kind() != ErrorKind::Io)) throw;
        if (p.skipped++ == 0) p.skipReason = e.what();
        continue;
      }
      std::copy(idx + i, idx + i + n, keptIndices + kept);
      kept += n;
      checkDeadline();
    }
    // Worker time by stage: what the dataset said it spent, the rest of the read is collating.
    const double readSeconds = seconds(Clock::now() - readStart);
    p.stages = {stages.read, stages.decode, stages.transform,
                std::max(0.0, readSeconds - stages.read - stages.decode - stages.transform), 0.0};
    p.staged = true;
    if (kept < count) {
      batch.indices = batch.indices.narrow(0, 0, kept).clone();
      count = kept;
    }
    status.sample.store(-1);
    if (c.device->isHost() && !c.expansions.empty()) {  // normalize_on device, and the device is the host
      status.stage.store(static_cast<int>(Stage::Transforming));
      const auto widenStart = Clock::now();
      widenFields(c, out->data(), count);
      p.stages[2] += seconds(Clock::now() - widenStart);
    }
    if (!c.device->isHost()) {
      if (c.options.non_blocking) {
        status.stage.store(static_cast<int>(Stage::Copying));
        const auto copyStart = Clock::now();
        copyBlock(c, out->data(), staging->data(), count);
        // Queued, not done (CUDA): the staging block and the batch's block wait for the copy.
        p.ready = c.device->fenceQueuedWork();
        staging->fenceRelease(p.ready);
        out->fenceRelease(p.ready);
        p.stages[4] = seconds(Clock::now() - copyStart);
      } else {
        p.staging = staging;  // a blocking copy happens on the consumer's thread
      }
    }
  }

  for (std::size_t f = 0; f < c.fields.size(); ++f) {
    batch.names.push_back(c.fields[f].name);
    batch.tensors.push_back(viewField(c, f, out->data() + c.fieldOffsets[f], count, out, !reuse));
  }
  if (reuse) batch.buffers = out;
  p.output = out;
  p.batch = std::move(batch);
  p.latencyMs = 1e3 * seconds(Clock::now() - start);
  status.stage.store(static_cast<int>(Stage::Idle));
  return p;
}

// Applied on the consumer's side once the batch is on the device: channels-
// last layout and transforms produce new tensors, so they follow the copy.
void finishOnDevice(LoaderCore& c, Batch& batch, std::int64_t epoch) {
  const bool nhwc = channelsLast(c);
  for (auto& t : batch.tensors) {
    if (t.dim() != 4) continue;
    // enable_transforms flips tensor datasets' samples; an image dataset's `transforms` say what
    // runs there (a RandomHorizontalFlip among them), so the two never both flip.
    if (c.options.enable_transforms && c.options.transforms.empty() && at::isFloatingType(t.scalar_type())) {
      t = t.clone();
      flipSamples(t, batch.indices.data_ptr<std::int64_t>(), t.size(0), c.options.generator_seed, epoch);
    }
    if (nhwc) t = t.contiguous(at::MemoryFormat::ChannelsLast);
  }
}

void workerLoop(const std::shared_ptr<EpochState>& state, int worker) {
  EpochState& s = *state;
  WorkerStatus& status = s.status[worker];
  for (;;) {
    std::int64_t b;
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      // Workers out of batches wait until the epoch ends (finishEpoch stops them): a fed epoch
      // may be fed more, and any may get the next epoch queued (Epoch::queueNext).
      s.workCv.wait(lock, [&] { return s.stopped || (s.nextClaim < s.batchCount && s.nextClaim < s.consumed + s.depth); });
      if (s.stopped) break;
      b = s.nextClaim++;
    }
    Produced p;
    try {
      if (s.core->cancelled()) break;
      p = produceBatch(s, b, status);
    } catch (const EpochStopped&) {
      break;
    } catch (...) {
      p = Produced{};
      p.index = b;
      p.error = std::current_exception();
    }
    status.batch.store(-1);
    status.stage.store(static_cast<int>(Stage::Idle));
    bool awaited;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (s.stopped) break;
      std::swap(s.slots[static_cast<std::size_t>(b % s.depth)], p);
      awaited = s.consumerSleepsFor == b;
    }
    if (awaited) s.readyCv.notify_one();
  }
  status.batch.store(-1);
}

Epoch::Epoch(std::shared_ptr<EpochState> state)
    : state_(std::move(state)), generation_(state_ ? state_->generation.load() : 0) {}
Epoch::Epoch(Epoch&& other) noexcept : state_(std::move(other.state_)), generation_(other.generation_) {}
Epoch::~Epoch() { stop(); }

bool Epoch::live() const { return state_ && state_->generation.load() == generation_; }

void Epoch::stop() {
  if (!live()) return;  // adopted by the next epoch: its workers are that epoch's now
  EpochState& s = *state_;
  bool completed, handedOver;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    completed = s.consumed >= consumerEnd(s) && !consumerFeedOpen(s);
    handedOver = s.handedOver;
  }
  if (!handedOver) finishEpoch(s, completed);  // else LoaderCore::pending keeps it for the next one
}

namespace {

// Whether an epoch may be queued behind the consumer's (under s.mutex): workers to make it, this
// epoch still running and not handed over, none queued yet.
bool acceptsQueuedEpoch(const EpochState& s) {
  return s.workerCount > 0 && !s.stopped && !s.finished && !s.handedOver && !hasQueuedEpoch(s);
}

}  // namespace

bool queueSegment(EpochState& s, std::shared_ptr<EpochSegment> segment) {
  const auto count = static_cast<std::int64_t>(segment->batchBegin.size()) - 1;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.fed || count == 0 || !acceptsQueuedEpoch(s)) return false;
    segment->firstBatch = s.batchCount;
    s.batchCount += count;
    s.segments.push_back(std::move(segment));
  }
  s.workCv.notify_all();
  return true;
}

bool Epoch::queueNext(std::int64_t e, std::vector<std::int64_t> order, const std::vector<std::int64_t>& batchSizes) {
  if (!live()) return false;
  EpochState& s = *state_;
  if (e < 0) throwBadInput("epoch " + std::to_string(e), "must be non-negative");
  checkOrder(*s.core->dataset, order);
  auto segment = std::make_shared<EpochSegment>();
  segment->epoch = e;
  segment->batchBegin = batchBoundaries(static_cast<std::int64_t>(order.size()), s.core->options, batchSizes);
  segment->order = std::move(order);
  return queueSegment(s, std::move(segment));
}

bool Epoch::queueNextFed(std::int64_t e, std::int64_t capacity) {
  if (!live()) return false;
  EpochState& s = *state_;
  if (e < 0) throwBadInput("epoch " + std::to_string(e), "must be non-negative");
  if (capacity < 0) throwBadInput("capacity", "must be non-negative");
  auto segment = std::make_shared<EpochSegment>();
  segment->epoch = e;
  segment->fed = true;
  segment->order.reserve(static_cast<std::size_t>(capacity));  // workers read it as it grows
  segment->batchBegin.reserve(static_cast<std::size_t>(capacity) + 1);
  segment->batchBegin.push_back(0);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.fed || s.feedOpen || !acceptsQueuedEpoch(s)) return false;
  segment->firstBatch = s.batchCount;
  s.segments.push_back(std::move(segment));
  s.feedOpen = true;
  return true;
}

void Epoch::feed(const std::int64_t* indices, std::int64_t count, std::int64_t batchSize) {
  if (!state_) throwBadInput("feed", "the epoch has ended");
  EpochState& s = *state_;
  const std::int64_t n = s.core->dataset->size(), limit = s.core->options.batch_size;
  if (batchSize < 1 || batchSize > limit)
    throwBadInput("feed", "batch size " + std::to_string(batchSize) + " must be 1-" + std::to_string(limit) +
                              " (the loader's batch_size)");
  for (std::int64_t i = 0; i < count; ++i)
    if (indices[i] < 0 || indices[i] >= n)
      throwBadInput("feed", "sample " + std::to_string(indices[i]) + " out of range for " + std::to_string(n) + " samples");
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.feedOpen) throwBadInput("feed", "the epoch's feed is closed (or it was not opened with openEpoch)");
    EpochSegment& fed = *s.segments.back();  // the consumer's, or the fed epoch queued behind it
    if (static_cast<std::int64_t>(fed.order.size()) + count > static_cast<std::int64_t>(fed.order.capacity()))
      throwBadInput("feed", "more samples than the " + std::to_string(fed.order.capacity()) + " the epoch was opened for");
    for (std::int64_t at = 0; at < count; at += batchSize) {
      const std::int64_t size = std::min(batchSize, count - at);
      fed.order.insert(fed.order.end(), indices + at, indices + at + size);
      fed.batchBegin.push_back(static_cast<std::int64_t>(fed.order.size()));
      ++s.batchCount;
    }
  }
  s.workCv.notify_all();
}

void Epoch::closeFeed() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->feedOpen = false;
  }
  state_->workCv.notify_all();
}

std::int64_t Epoch::batches() const {
  if (!live()) return 0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return consumerEnd(*state_) - state_->segmentFirst;
}

std::vector<std::int64_t> Epoch::order() const {
  if (!live()) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->segments.front()->order;  // the consumer's epoch (adoption drops those before it)
}

bool Epoch::waitReady(std::chrono::milliseconds wait) {
  if (!live()) return true;
  EpochState& s = *state_;
  if (s.waitingFor != s.consumed) {
    s.waitingFor = s.consumed;
    s.waitingSince = Clock::now();
  }
  if (s.workerCount == 0) return true;  // next() produces the batch on this thread
  const auto until = Clock::now() + wait;
  std::unique_lock<std::mutex> lock(s.mutex);
  const std::size_t at = static_cast<std::size_t>(s.consumed % s.depth);
  for (;;) {
    const std::int64_t end = consumerEnd(s);
    if (s.finished || s.stopped || s.handedOver || s.consumed >= end || s.slots[at].index == s.consumed) return true;
    // next() would help: produce the next unclaimed batch itself (see next()).
    if (s.core->options.timeout <= 0 && s.nextClaim < end && s.nextClaim < s.consumed + s.depth) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    s.consumerSleepsFor = s.consumed;
    s.readyCv.wait_until(lock, std::min(until, now + std::chrono::milliseconds(20)));
    s.consumerSleepsFor = -1;
    const LoaderCore& c = *s.core;
    if (c.cancelled()) return true;
    if (c.options.timeout > 0 && seconds(Clock::now() - s.waitingSince) > c.options.timeout) return true;
  }
}

std::optional<Batch> Epoch::next() {
  if (!live()) return std::nullopt;
  EpochState& s = *state_;
  LoaderCore& c = *s.core;
  c.device->refuseCapture();  // before a batch is taken: a refused next() loses none
  std::int64_t end;
  bool open;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.finished || s.handedOver) return std::nullopt;
    end = consumerEnd(s);
    open = consumerFeedOpen(s);
  }
  // The sampler's next order, once drawn: queued, so the workers go on into that epoch. At the
  // epoch's end it is waited for (a short epoch can end before the draw does).
  if (s.nextOrder.valid() &&
      (end <= s.consumed || s.nextOrder.wait_for(std::chrono::seconds(0)) == std::future_status::ready)) {
    auto segment = std::make_shared<EpochSegment>();
    segment->epoch = s.nextOrderEpoch;
    segment->order = s.nextOrder.get();
    segment->batchBegin = batchBoundaries(static_cast<std::int64_t>(segment->order.size()), c.options, {});
    segment->samplerOrder = true;
    queueSegment(s, std::move(segment));  // the batch count grows; this epoch's end stays
  }
  const auto asked = s.waitingFor == s.consumed ? s.waitingSince : Clock::now();
  s.waitingFor = -1;
  if (!s.started) {
    s.started = true;
    s.firstAsk = asked;
    s.window.start = asked;
  } else {
    s.window.stepSeconds += seconds(asked - s.lastReturn);
  }
  const std::int64_t asking = s.consumed - s.segmentFirst;
  auto subject = [&] { return "epoch " + std::to_string(s.epoch) + " batch " + std::to_string(asking); };
  auto fail = [&](std::exception_ptr error) {
    finishEpoch(s, false);
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      throw Error(e.kind(), subject(), e.what());
    } catch (const EpochStopped&) {  // the consumer's own batch, cut short by a cancel from another thread
      throw Error(ErrorKind::Cancelled, subject(), "cancelled");
    } catch (const c10::Error& e) {
      throw Error(ErrorKind::BadInput, subject(), e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw Error(ErrorKind::BadInput, subject(), e.what());
    }
  };
  if (c.cancelled()) {
    finishEpoch(s, false);
    throw Error(ErrorKind::Cancelled, subject(), "cancelled");
  }
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.heldForReuse.reset();  // reuse mode: the previous batch's buffers go back now
  }
  if (s.consumed >= end) {
    // The feeder and the consumer are one thread: waiting would never end.
    if (open) throwBadInput(subject(), "no batch fed yet: feed() the epoch (or closeFeed()) before next()");
    bool queued;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      queued = hasQueuedEpoch(s);
    }
    if (queued) {  // a queued epoch follows: its workers go on, the Loader keeps it
      recordSummary(s, true);
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        s.handedOver = true;
      }
      bool loaderGone;
      {
        std::lock_guard<std::mutex> lock(c.mutex);
        c.pending = state_;
        loaderGone = c.loaderGone;
      }
      if (loaderGone) discardPending(c);  // no epoch of a destroyed Loader will adopt it: stop it now
      return std::nullopt;
    }
    finishEpoch(s, true);
    return std::nullopt;
  }

  Produced p;
  int ready = 0;
  if (s.workerCount == 0) {
    const double timeout = c.options.timeout;
    const auto deadline = timeout > 0 ? asked + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(std::min(timeout, 1e9)))  // no overflow
                                      : Clock::time_point::max();
    try {
      p = produceBatch(s, s.consumed, s.status[s.workerCount], deadline);
    } catch (...) {
      fail(std::current_exception());
    }
    s.consumed++;
  } else {
    std::unique_lock<std::mutex> lock(s.mutex);
    for (const auto& slot : s.slots) ready += slot.index >= s.consumed ? 1 : 0;
    const std::size_t at = static_cast<std::size_t>(s.consumed % s.depth);
    const double timeout = c.options.timeout;
    // A consumer that would wait helps instead: it produces the next
    // unclaimed batch within the ring (work-helping keeps every core on the
    // gather when the consumer has nothing else to do). With a timeout the
    // consumer only waits, so that it can watch the workers.
    const bool help = timeout <= 0;
    while (s.slots[at].index != s.consumed) {
      // Helping stays within this epoch: the consumer's time at its end is the boundary's gap.
      if (help && !s.stopped && s.nextClaim < end && s.nextClaim < s.consumed + s.depth) {
        const std::int64_t b = s.nextClaim++;
        lock.unlock();
        Produced mine;
        try {
          mine = produceBatch(s, b, s.status[s.workerCount]);
        } catch (...) {
          mine = Produced{};
          mine.index = b;
          mine.error = std::current_exception();
        }
        s.status[s.workerCount].batch.store(-1);
        lock.lock();
        std::swap(s.slots[static_cast<std::size_t>(b % s.depth)], mine);
        continue;
      }
      s.consumerSleepsFor = s.consumed;
      s.readyCv.wait_for(lock, std::chrono::milliseconds(20));
      s.consumerSleepsFor = -1;
      if (c.cancelled()) {
        lock.unlock();
        finishEpoch(s, false);
        throw Error(ErrorKind::Cancelled, subject(), "cancelled");
      }
      if (timeout > 0 && seconds(Clock::now() - asked) > timeout && s.slots[at].index != s.consumed) {
        const std::string stall = describeStall(s, s.consumed);
        lock.unlock();
        finishEpoch(s, false);
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", timeout);
        throw Error(ErrorKind::Timeout, subject(), std::string("not ready after timeout ") + limit + " s: " + stall);
      }
    }
    std::swap(p, s.slots[at]);
    s.slots[at] = Produced{};
    s.consumed++;
    lock.unlock();
    // One slot freed, one claim more: one worker. Waking every worker (notify_all) sent all but one
    // back to sleep, and on 2 cores each needless wake-up cost the batch a context switch
    // (Fashion-MNIST resident: 4.30 -> 4.85 M samples/s, medians of six runs).
    s.workCv.notify_one();
  }
  if (p.error) fail(p.error);
  if (p.staging) {  // non_blocking=false: the copy is done when next() returns, as in PyTorch
    const auto copyStart = Clock::now();
    copyBlock(c, p.output->data(), p.staging->data(), p.batch->size());
    finishQueuedWork(*c.device);
    p.stages[4] = seconds(Clock::now() - copyStart);
  }
  p.staging.reset();
  // The batch is ready on the consumer's stream (its work waits for the worker's copy or
  // gather, the CPU does not), and its block is not reused before the consumer's stream got
  // past what it queued on the batch. Channels-last and flips below run on that stream.
  if (p.ready) c.device->orderAfter(*p.ready);
  p.output->fenceRelease(c.device->consumerUseFence());
  if (!c.device->isHost()) p.batch->streams = std::make_shared<BatchStreams>(BatchStreams{p.output, c.device});
  finishOnDevice(c, *p.batch, p.batch->epoch);
  if (c.options.reuse_buffers) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.heldForReuse = p.output;
  }
  p.output.reset();  // otherwise the batch's tensors hold the lease

  const auto now = Clock::now();
  const double waited = seconds(now - asked);
  const std::int64_t bytes = p.batch->nbytes();
  s.waitTotal += waited;
  s.samples += p.batch->size();
  s.bytes += bytes;
  TelemetryWindow& w = s.window;
  w.batches++;
  w.samples += p.batch->size();
  w.bytes += bytes;
  w.waitSeconds += waited;
  w.readySum += ready;
  w.latenciesMs.push_back(p.latencyMs);
  if (p.staged) {
    for (std::size_t k = 0; k < p.stages.size(); ++k) {
      w.stages[k] += p.stages[k];
      s.stageTotals[k] += p.stages[k];
    }
    w.stagedBatches++;
    s.stagedBatches++;
  }
  if (p.skipped > 0 && s.skipped == 0) s.firstSkipped = p.skipReason;
  s.skipped += p.skipped;
  if (seconds(now - w.start) * 1e3 >= c.options.telemetry_interval_ms) emit(s, now, false);
  s.lastReturn = Clock::now();
  return std::move(p.batch);
}

}  // namespace stoker
