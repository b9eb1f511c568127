#include "data/loader.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "data/datasets/tensor_dataset.h"
#include "data/loader_internal.h"
#include "data/sampler.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/huge_pages.h"
#include "util/progress.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

constexpr std::int64_t kAlign = 256;  // field offsets inside a batch block (CUDA wants 256)

// Fills host tensors for a dataset that produces samples on demand, in
// parallel chunks (resident mode "decodes once").
std::vector<at::Tensor> materialise(const Dataset& d, int threads, const CancelToken* cancel) {
  std::vector<at::Tensor> out;
  for (const auto& f : d.fields()) {
    std::vector<std::int64_t> shape{d.size()};
    shape.insert(shape.end(), f.sampleShape.begin(), f.sampleShape.end());
    out.push_back(at::empty(shape, at::TensorOptions().dtype(f.dtype)));
  }
  constexpr std::int64_t chunk = 256;
  const std::int64_t chunks = (d.size() + chunk - 1) / chunk;
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex errorMutex;
  runJobs(std::max(1, threads), [&] {
    std::vector<std::int64_t> indices(chunk);
    std::vector<std::uint8_t*> dst(out.size());
    for (std::int64_t c; (c = next.fetch_add(1)) < chunks;) {
      if (cancel && cancel->cancelled()) return;
      const std::int64_t begin = c * chunk, count = std::min(chunk, d.size() - begin);
      for (std::int64_t i = 0; i < count; ++i) indices[static_cast<std::size_t>(i)] = begin + i;
      for (std::size_t f = 0; f < out.size(); ++f)
        dst[f] = static_cast<std::uint8_t*>(out[f].data_ptr()) + begin * d.fields()[f].sampleBytes;
      try {
        d.readBatch(indices.data(), count, dst.data());
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error) error = std::current_exception();
        next.store(chunks);
      }
    }
  });
  if (error) std::rethrow_exception(error);
  if (cancel) cancel->throwIfCancelled("loading the dataset");
  return out;
}

// Moves the fields to the device; throws Error(OutOfMemory) with nothing left allocated.
void loadResident(LoaderCore& c) {
  std::vector<at::Tensor> host = c.dataset->hostFields();
  // All cores but one decode (at least num_workers threads): the run starts only when this is
  // done, and the one left keeps the caller responsive (the workbench's GUI thread, other devices).
  if (host.empty())
    host = materialise(*c.dataset,
                       std::max({1, c.options.num_workers, static_cast<int>(std::thread::hardware_concurrency()) - 1}),
                       c.cancel.load(std::memory_order_acquire));
  if (c.device->isHost()) {
    c.resident = host;  // already where batches are made: zero copy
    c.residentDeviceBytes = 0;
    c.residentScaled = c.dataset->scaledFields();
    for (std::size_t f = 0; f < c.residentScaled.size() && f < c.fields.size(); ++f)
      if (c.residentScaled[f])
        c.note("resident: " + c.fields[f].name + " gathered from the dataset's u8 bytes, divided by " +
               std::to_string(static_cast<int>(c.residentScaled[f]->divisor)) +
               " as they are copied (a quarter of the float32 field's reads, the same values)");
    return;
  }
  std::vector<at::Tensor> onDevice;
  std::int64_t bytes = 0;
  for (const auto& h : host) {
    const auto n = static_cast<std::int64_t>(h.nbytes());
    at::Tensor raw = c.device->allocateBytes(std::max<std::int64_t>(n, 1));
    constexpr std::int64_t piece = 64 << 20;
    for (std::int64_t off = 0; off < n; off += piece)
      c.device->copyToDevice(static_cast<std::uint8_t*>(raw.data_ptr()) + off,
                             static_cast<const std::uint8_t*>(h.data_ptr()) + off, std::min(piece, n - off), false);
    finishQueuedWork(*c.device);  // workers gather from it on streams of their own
    onDevice.push_back(at::from_blob(raw.data_ptr(), h.sizes(), [raw](void*) {},
                                     at::TensorOptions().dtype(h.scalar_type()).device(c.device->torchDevice())));
    bytes += n;
  }
  c.resident = std::move(onDevice);
  c.residentDeviceBytes = bytes;
}

// Streaming an in-memory dataset with pin_memory to a device that can read host memory (CUDA):
// the device gathers each batch from the dataset's own pages, pinned once, instead of a worker
// copying rows into pinned staging and the copy engine moving the staging (DRAM carried the bytes
// three times). STOKER_CUDA_MAP_HOST=0 keeps the staging path (to measure one against the other).
void mapHostDataset(LoaderCore& c) {
  if (!c.datasetInMemory || c.device->isHost() || !c.options.pin_memory) return;
  const char* env = std::getenv("STOKER_CUDA_MAP_HOST");
  if (env && std::string(env) == "0") return;
  std::vector<at::Tensor> host = c.dataset->hostFields();
  std::string why;
  c.hostMapping = c.device->mapHostFields(host, why);
  if (c.hostMapping) {
    c.mappedFields = std::move(host);
    for (const auto& t : c.mappedFields) c.mappedBytes += static_cast<std::int64_t>(t.nbytes());
    c.note("streaming: " + c.device->name() + " gathers each batch straight from the dataset in host memory (" +
           formatMiB(c.dataset->totalBytes()) + " pinned once, no staging copy)");
  } else if (!why.empty()) {
    c.note("streaming through pinned staging: " + why);
  }
}

void chooseModeAndLoad(LoaderCore& c) {
  const LoaderOptions& o = c.options;
  LoadingMode mode = o.loading_mode;
  std::vector<at::Tensor> preplaced = std::move(c.preplaced);
  c.preplaced.clear();
  if (!preplaced.empty() && mode != LoadingMode::Streaming) {
    if (preplaced.size() != c.fields.size()) throwBadInput("resident fields", "one per dataset field expected");
    c.residentDeviceBytes = 0;
    for (const auto& t : preplaced) c.residentDeviceBytes += static_cast<std::int64_t>(t.nbytes());
    c.resident = std::move(preplaced);
    c.mode = LoadingMode::Resident;
    // How they came (another device's loader by NCCL broadcast, a script's own tensors) is the
    // caller's to say; the loader only neither loads nor copies them.
    c.note("resident: the dataset's fields were handed to the loader on " + c.device->name() + " (not loaded, not copied)");
    return;
  }
  const Dataset::ResidentAdvice advice = c.dataset->residentAdvice();
  if (mode == LoadingMode::Resident && advice.refuse)
    throwBadInput("loading_mode resident", advice.reason + " (use auto or streaming)");
  if (mode == LoadingMode::Auto) {
    if (advice.avoid) {
      mode = LoadingMode::Streaming;
      c.note("auto: streaming (" + advice.reason + ")");
    } else if (c.device->isHost() && c.datasetInMemory) {
      mode = LoadingMode::Resident;
      c.note("auto: resident (the dataset is in host memory already; batches are gathered from it, zero copy)");
    } else {
      const DeviceMemory m = c.device->memory();
      const double budget = o.vram_max_usage * static_cast<double>(m.total) - static_cast<double>(m.used);
      const std::int64_t need = c.dataset->totalBytes() + 2 * c.blockBytes;
      mode = static_cast<double>(need) <= budget ? LoadingMode::Resident : LoadingMode::Streaming;
      c.note("auto: " + loadingModeName(mode) + " (dataset + 2 batches need " + formatMiB(need) + ", " + c.device->name() +
             " allows " + formatMiB(static_cast<std::int64_t>(std::max(0.0, budget))) + " under vram_max_usage " +
             std::to_string(o.vram_max_usage).substr(0, 4) + ")");
    }
  }
  if (mode == LoadingMode::Resident) {
    try {
      loadResident(c);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::OutOfMemory) throw;
      c.resident.clear();
      c.residentScaled.clear();
      c.residentDeviceBytes = 0;
      if (o.loading_mode == LoadingMode::Resident)
        throw Error(ErrorKind::OutOfMemory, "loading_mode resident",
                    std::string(e.what()) + " (the dataset needs " + formatMiB(c.dataset->totalBytes()) +
                        "; use auto or streaming)");
      c.note(std::string("fell back to streaming: ") + e.what());
      mode = LoadingMode::Streaming;
    }
  }
  c.mode = mode;
  if (mode == LoadingMode::Streaming) mapHostDataset(c);
}

int chooseDepth(LoaderCore& c) {
  const LoaderOptions& o = c.options;
  if (!o.auto_tune) return o.prefetch;
  // flodl re-sizes the ring from headroom under vram_max_usage; our own idle
  // pool blocks count as headroom since the ring will reuse them.
  const DeviceMemory m = c.device->memory();
  const std::int64_t ours = c.outputPool->reservedBytes() - c.outputPool->allocatedBytes();
  const double limit = o.vram_max_usage * static_cast<double>(m.total);
  const double headroom = limit - static_cast<double>(m.used - ours);
  const auto fit = static_cast<std::int64_t>(headroom / static_cast<double>(std::max<std::int64_t>(c.blockBytes, 1)));
  const int depth = static_cast<int>(std::clamp<std::int64_t>(fit - o.num_workers, 1, o.prefetch));
  return depth;
}

// normalize_on: whether the dataset's image fields cross as bytes and are widened on the device.
void chooseByteExpansion(LoaderCore& c) {
  const NormalizeOn where = c.options.normalize_on;
  if (where == NormalizeOn::Host || (where == NormalizeOn::Auto && c.device->isHost())) return;
  std::vector<std::optional<ByteExpansion>> offered = c.dataset->byteExpansions();
  if (std::none_of(offered.begin(), offered.end(), [](const auto& e) { return e.has_value(); })) {
    if (where == NormalizeOn::Device && !c.options.transforms.empty())
      c.note("normalize_on device: nothing to widen (the transforms' output is already u8)");
    return;
  }
  if (c.datasetInMemory || c.options.loading_mode == LoadingMode::Resident) {
    if (where == NormalizeOn::Device) c.note("normalize_on device: a resident dataset is normalised once, on the host");
    return;
  }
  std::string why;
  if (!c.device->expandsBytes(why)) {
    if (where == NormalizeOn::Device) throwBadInput("normalize_on device", why);
    c.note("normalize_on auto: on the host (" + why + ")");
    return;
  }
  offered.resize(c.fields.size());
  std::int64_t bytes = 0, values = 0;
  for (std::size_t f = 0; f < c.fields.size(); ++f)
    if (offered[f]) {
      bytes += offered[f]->bytesPerSample();
      values += c.fields[f].sampleBytes;
    }
  c.expansions = std::move(offered);
  c.note("normalize_on " + std::string(where == NormalizeOn::Device ? "device" : "auto") + ": images cross to " +
         c.device->name() + " as u8, " + formatMiB(bytes * c.options.batch_size) + " a batch instead of " +
         formatMiB(values * c.options.batch_size) + ", and are widened there");
}

void layOutBlock(LoaderCore& c) {
  const auto aligned = [&c](std::int64_t perSample) { return (c.options.batch_size * perSample + kAlign - 1) / kAlign * kAlign; };
  std::int64_t offset = 0;
  for (const auto& f : c.fields) {
    c.fieldOffsets.push_back(offset);
    offset += aligned(f.sampleBytes);
  }
  c.bytesOffsets.assign(c.fields.size(), -1);
  for (std::size_t f = 0; f < c.fields.size(); ++f)
    if (const ByteExpansion* e = c.expansion(f)) {
      c.bytesOffsets[f] = offset;
      offset += aligned(e->bytesPerSample());
    }
  c.blockBytes = std::max<std::int64_t>(offset, kAlign);
  std::int64_t staged = 0;
  for (std::size_t f = 0; f < c.fields.size(); ++f) {
    const ByteExpansion* e = c.expansion(f);
    c.readBytes.push_back(e ? e->bytesPerSample() : c.fields[f].sampleBytes);
    if (c.device->isHost()) {
      c.readOffsets.push_back(e ? c.bytesOffsets[f] : c.fieldOffsets[f]);
    } else {
      c.readOffsets.push_back(staged);
      staged += aligned(c.readBytes.back());
    }
  }
  c.stagingBytes = std::max<std::int64_t>(staged, kAlign);
}

std::string fewWorkersForNetworkNote(int workers) {
  return "each batch waits a round trip to the server (uncached remote token windows), so the batches in flight set "
         "the pace, " + std::string(workers == 0 ? "one at a time on the consumer's thread" : "one a worker") +
         " (num_workers " + std::to_string(workers) +
         "); far from the server more workers read more: they are threads that wait (at 50 ms on 2 cores, 3,700 "
         "windows/s with 2, 19,000 with 16, 41,000 with 64; `stoker tune` tries up to 64), and a cache_dir reads "
         "later epochs from local disk";
}

bool waitsOnNetwork(const LoaderCore& c) { return c.mode == LoadingMode::Streaming && c.dataset->batchWaitsOnNetwork(); }

}  // namespace

void LoaderCore::gatherResident(std::size_t f, const std::int64_t* indices, std::int64_t count, void* out) const {
  if (f < residentScaled.size() && residentScaled[f])
    gatherScaledHostRows(residentScaled[f]->bytes, residentScaled[f]->divisor, indices, count, static_cast<float*>(out));
  else
    device->gatherRows(resident[f], indices, count, out);
}

void LoaderCore::note(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex);
  notes.push_back(text);
}

DeviceMemory LoaderCore::memory() const {
  DeviceMemory m = device->memory();
  if (device->kind() != DeviceKind::Cuda) {
    // The caching allocator reports these on CUDA; elsewhere they are ours.
    // (Staging buffers are host memory and not counted against the device.)
    m.reserved = residentDeviceBytes + outputPool->reservedBytes();
    m.allocated = residentDeviceBytes + outputPool->allocatedBytes();
  }
  return m;
}

std::int64_t Batch::nbytes() const {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

void Batch::recordStream(const c10::Stream& stream) const {
  if (!streams) {  // a host device's batch, or one made by hand: nothing to order, only the device to check
    if (stream.device_type() != c10::kCPU && !tensors.empty() && tensors[0].is_cpu())
      throwBadInput("record_stream", "a stream on " + stream.device().str() + " for a batch in host memory");
    return;
  }
  FenceMaker maker = streams->device->streamUseFence(stream);  // refuses another device's stream
  if (auto block = streams->block.lock()) block->alsoFenceRelease(std::move(maker));
}

const at::Tensor& Batch::operator[](std::string_view name) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return tensors[i];
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throwBadInput("batch field " + std::string(name), "no such field (fields: " + known + ")");
}

std::shared_ptr<Dataset> decodeOnce(std::shared_ptr<Dataset> dataset, int threads, const CancelToken* cancel) {
  if (!dataset->hostFields().empty()) return dataset;
  std::vector<std::string> names;
  for (const auto& f : dataset->fields()) names.push_back(f.name);
  return std::make_shared<TensorDataset>(dataset->description() + ", decoded once", std::move(names),
                                         materialise(*dataset, threads, cancel));
}

Loader::Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options, DeviceSpec device, SimDeviceConfig sim)
    : Loader(std::move(dataset), std::move(options), DeviceBackend::create(device, sim)) {}

Loader::Loader(std::shared_ptr<Dataset> dataset, LoaderOptions options, std::shared_ptr<DeviceBackend> device,
               const CancelToken* cancel, std::vector<at::Tensor> residentOnDevice)
    : core_(std::make_shared<LoaderCore>()) {
  validateLoaderOptions(options);
  if (!dataset) throwBadInput("loader", "no dataset");
  LoaderCore& c = *core_;
  c.dataset = std::move(dataset);
  c.options = std::move(options);
  c.device = std::move(device);
  c.cancel = cancel;
  c.preplaced = std::move(residentOnDevice);
  c.fields = c.dataset->fields();
  c.datasetInMemory = !c.dataset->hostFields().empty();
  c.parallelReads = c.dataset->parallelReads();
  c.rank = c.options.shard_rank;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  c.host = host;
  c.pid = getpid();
  c.advice = c.dataset->openNotes();
  c.notes = c.advice;
  checkSamplerFits(c.options, c.dataset->size());  // at construction, not at the first epoch
  hugePagesWanted();  // a bad STOKER_HUGE_PAGES is refused here, not at the first block
  chooseByteExpansion(c);
  layOutBlock(c);
  const int keep = c.options.collate_buffer_size > 0 ? c.options.collate_buffer_size
                                                      : c.options.num_workers + c.options.prefetch + 1;
  auto dev = c.device;
  c.outputPool = BufferPool::create([dev](std::int64_t n) { return dev->allocateBytes(n); }, c.blockBytes, keep);
  chooseModeAndLoad(c);
  if (waitsOnNetwork(c) && c.options.num_workers < workersForNetwork(c.blockBytes)) {
    c.notes.push_back(fewWorkersForNetworkNote(c.options.num_workers));
    c.advice.push_back(c.notes.back());
  }
  if (c.mode == LoadingMode::Streaming && !c.device->isHost() && !c.hostMapping) {
    const bool pinned = c.options.pin_memory;
    c.stagingPool = BufferPool::create([dev, pinned](std::int64_t n) { return dev->allocateHostBytes(n, pinned); },
                                       c.stagingBytes, keep);
  }
  if (c.options.num_workers > 0)
    c.workers = std::make_unique<WorkerPool>(c.options.num_workers, c.options.persistent_workers);
}

namespace {
// Loader::retune without its note: the knobs applied, the change in words ("" for none).
std::string applyBatchBoundaryKnobs(LoaderCore& c, const LoaderOptions& next) {
  validateLoaderOptions(next);
  for (const std::string& k : changedKnobs(c.options, next))
    if (!isBatchBoundaryKnob(k))
      throwBadInput(k, "cannot change on a running loader (it changes the sample order or the batch layout); "
                       "start a new loader");
  discardPending(c);  // batches of a queued epoch were made with the old knobs
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto running = c.running.lock()) {
      std::lock_guard<std::mutex> stateLock(running->mutex);
      if (!running->finished) throwBadInput("retune", "an epoch is running; stop it first");
    }
  }
  const LoaderOptions old = c.options;
  c.orderAhead = {};  // drawn with the old knobs (waits for the draw)
  c.orderAheadEpoch = -1;
  c.options = next;
  // Worker threads and pools are sized by these knobs: rebuild what changed.
  if (next.num_workers != old.num_workers || next.persistent_workers != old.persistent_workers) {
    c.workers.reset();
    if (next.num_workers > 0) c.workers = std::make_unique<WorkerPool>(next.num_workers, next.persistent_workers);
  }
  const auto keepOf = [](const LoaderOptions& o) {
    return o.collate_buffer_size > 0 ? o.collate_buffer_size : o.num_workers + o.prefetch + 1;
  };
  const bool keepChanged = keepOf(next) != keepOf(old);
  auto dev = c.device;
  if (keepChanged)
    c.outputPool = BufferPool::create([dev](std::int64_t n) { return dev->allocateBytes(n); }, c.blockBytes, keepOf(next));
  if (c.stagingPool && (keepChanged || next.pin_memory != old.pin_memory)) {
    const bool pinned = next.pin_memory;
    c.stagingPool = BufferPool::create([dev, pinned](std::int64_t n) { return dev->allocateHostBytes(n, pinned); },
                                       c.stagingBytes, keepOf(next));
  }
  return describeChange(old, next);
}
}  // namespace

void Loader::retune(const LoaderOptions& next) {
  const std::string change = applyBatchBoundaryKnobs(*core_, next);
  if (!change.empty()) core_->note("retuned: " + change);
}

int workersForNetwork(std::int64_t batchBytes) {
  const std::int64_t fit = remoteWorkerBytes / (3 * std::max<std::int64_t>(1, batchBytes));
  return static_cast<int>(std::clamp<std::int64_t>(fit, 1, kWorkersForNetwork));
}

int Loader::networkWorkers() const { return waitsOnNetwork(*core_) ? workersForNetwork(core_->blockBytes) : 0; }

bool Loader::raiseWorkersForNetwork(int batchesPerWorker) {
  if (batchesPerWorker < 0) throwBadInput("batches per worker", "must be 0 (keep the ring) or more");
  LoaderCore& c = *core_;
  const int workers = networkWorkers();
  if (workers <= c.options.num_workers) return false;
  const int before = c.options.num_workers;
  LoaderOptions next = c.options;
  next.num_workers = workers;
  if (batchesPerWorker > 0)
    next.prefetch = std::max(next.prefetch, std::min(1024, std::max(8, batchesPerWorker * workers)));  // as prefetchForWorkers
  applyBatchBoundaryKnobs(c, next);
  // In place of the few-workers note: why there are this many.
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto* texts : {&c.notes, &c.advice})
    texts->erase(std::remove(texts->begin(), texts->end(), fewWorkersForNetworkNote(before)), texts->end());
  c.notes.push_back("num_workers " + std::to_string(workers) + " (not given): each batch of uncached remote token windows "
                    "waits a round trip to the server, and the workers are threads that wait, one batch each (at 50 ms "
                    "on 2 cores, 3,700 windows/s with 2, 19,000 with 16, 41,000 with 64; `stoker tune` tries up to "
                    "64); give num_workers to choose");
  return true;
}

Loader::~Loader() {
  if (!core_) return;  // moved from
  {
    std::lock_guard<std::mutex> lock(core_->mutex);
    core_->loaderGone = true;  // an epoch still running hands nothing over now (Epoch::next)
  }
  discardPending(*core_);  // its workers wait for a consumer that will not come
}
Loader::Loader(Loader&&) noexcept = default;

void Loader::addObserver(std::shared_ptr<TelemetryObserver> observer) {
  std::lock_guard<std::mutex> lock(core_->mutex);
  core_->observers.push_back(std::move(observer));
}

void Loader::setCancelToken(const CancelToken* token) { core_->cancel.store(token, std::memory_order_release); }
void Loader::setTelemetryRank(int rank) {
  std::lock_guard<std::mutex> lock(core_->mutex);
  core_->rank = rank;
}
void Loader::setTelemetryCollectives(const std::string& backend) {
  std::lock_guard<std::mutex> lock(core_->mutex);
  core_->collectives = backend;
}

namespace {
std::shared_ptr<EpochState> adoptPending(LoaderCore& c, std::int64_t e, const std::vector<std::int64_t>* order,
                                         const std::vector<std::int64_t>* begins, std::int64_t fedCapacity = -1);
}  // namespace

namespace {

// Datasets of at least this many samples get their next epoch's order drawn ahead: below it the
// draw takes under a millisecond.
constexpr std::int64_t kDrawAheadSamples = 32768;

// Where the host would wait on the device anyway: resident batches on a device (on CUDA, launched
// by next() with the workers idle), whose epochs of small rows were bound by the draw (PyTorch's
// randperm: 8 ms for 262,144 rows on the 2-core VM against 0.8 ms of gathers on an H200). On the
// host the draw's thread competes with the workers, and the OpenMP team torch starts in each new
// thread spins on the cores they need: resident Fashion-MNIST on the 2-core VM fell from 0.81-0.92x
// to 0.53-0.64x the randperm + index_select loop. There the order is drawn in epoch().
bool drawsOrderAhead(const LoaderCore& c) {
  return c.mode == LoadingMode::Resident && !c.device->isHost() && c.dataset->size() >= kDrawAheadSamples &&
         !c.dataset->hasOwnEpochOrder();
}

// Epoch e's order drawn on a thread of its own.
std::future<std::vector<std::int64_t>> drawOrderLater(const LoaderCore& c, std::int64_t e) {
  return std::async(std::launch::async, [dataset = c.dataset, options = c.options, e] {
    return epochIndicesFor(*dataset, options, e);
  });
}

// Epoch e's order: the one drawn ahead when it was for e (the same draw: the sampler depends only
// on the options, the dataset's size and e), else drawn now.
std::vector<std::int64_t> orderFor(LoaderCore& c, std::int64_t e) {
  if (c.orderAhead.valid()) {
    const bool mine = c.orderAheadEpoch == e;
    std::future<std::vector<std::int64_t>> ahead = std::move(c.orderAhead);
    c.orderAheadEpoch = -1;
    if (mine) return ahead.get();  // a draw that failed throws here, as drawing now would
  }  // another epoch's: dropped (its destructor waits for the draw)
  return epochIndicesFor(*c.dataset, c.options, e);
}

}  // namespace

Epoch Loader::epoch(std::int64_t e, Lookahead lookahead) {
  if (e < 0) throwBadInput("epoch " + std::to_string(e), "must be non-negative");
  LoaderCore& c = *core_;
  std::shared_ptr<EpochState> adopted = adoptPending(c, e, nullptr, nullptr);
  Epoch started = adopted ? Epoch(std::move(adopted)) : epochOver(e, orderFor(c, e));
  // The workers go on into epoch e + 1 before this one ends (its order is drawn meanwhile); the
  // next epoch(e + 1) serves what they made. Workers that stop at each epoch's end do not.
  if (lookahead == Lookahead::NextEpoch && c.options.persistent_workers && c.options.num_workers > 0 &&
      started.state_->workerCount > 0) {
    EpochState& s = *started.state_;
    s.nextOrderEpoch = e + 1;
    s.nextOrder = drawOrderLater(c, e + 1);
  } else if (drawsOrderAhead(c)) {
    // Else the next epoch's order alone is drawn while this epoch runs, for the next epoch(e + 1).
    c.orderAheadEpoch = e + 1;
    c.orderAhead = drawOrderLater(c, e + 1);
  }
  return started;
}

std::vector<std::int64_t> batchBoundaries(std::int64_t n, const LoaderOptions& o, const std::vector<std::int64_t>& sizes) {
  const std::int64_t bs = o.batch_size;
  std::vector<std::int64_t> begins{0};
  if (!sizes.empty()) {  // a plan's per-step sizes (unequal GPUs): each fits the batch buffers
    for (const std::int64_t b : sizes) {
      if (b < 1 || b > bs)
        throwBadInput("batch sizes", "each must be 1 to batch_size " + std::to_string(bs) + " (got " + std::to_string(b) + ")");
      begins.push_back(begins.back() + b);
    }
    if (begins.back() != n)
      throwBadInput("batch sizes", "sum to " + std::to_string(begins.back()) + ", the order has " + std::to_string(n) + " samples");
    return begins;
  }
  const std::int64_t batches = o.drop_last ? n / bs : (n + bs - 1) / bs;
  for (std::int64_t b = 1; b < batches; ++b) begins.push_back(b * bs);
  if (batches > 0) begins.push_back(std::min(n, batches * bs));
  return begins;
}

void checkOrder(const Dataset& dataset, const std::vector<std::int64_t>& order) {
  const std::int64_t size = dataset.size();
  for (const std::int64_t i : order)
    if (i < 0 || i >= size)
      throwBadInput("sample " + std::to_string(i), "out of range for " + std::to_string(size) + " samples");
}

Epoch Loader::epochOver(std::int64_t e, std::vector<std::int64_t> order, const std::vector<std::int64_t>& batchSizes) {
  if (e < 0) throwBadInput("epoch " + std::to_string(e), "must be non-negative");
  checkOrder(*core_->dataset, order);
  std::vector<std::int64_t> begins = batchBoundaries(static_cast<std::int64_t>(order.size()), core_->options, batchSizes);
  return startEpoch(e, std::move(order), std::move(begins), false);
}

Epoch Loader::openEpoch(std::int64_t e, std::int64_t capacity) {
  if (e < 0) throwBadInput("epoch " + std::to_string(e), "must be non-negative");
  if (capacity < 0) throwBadInput("capacity", "must be non-negative");
  if (std::shared_ptr<EpochState> adopted = adoptPending(*core_, e, nullptr, nullptr, capacity))
    return Epoch(std::move(adopted));  // queued by the previous epoch (Epoch::queueNextFed)
  std::vector<std::int64_t> order, begins{0};
  order.reserve(static_cast<std::size_t>(capacity));
  begins.reserve(static_cast<std::size_t>(capacity) + 1);
  return startEpoch(e, std::move(order), std::move(begins), true);
}

namespace {

// The pending state (see LoaderCore::pending) when its queued epoch is epoch `e` over exactly this
// order and these batches: the consumer moves on to it, the workers never stopped. Null otherwise.
// `order` null: the sampler's order for `e` (Loader::epoch), which a segment the core queued is.
// `fedCapacity` >= 0: a fed epoch (Loader::openEpoch) of that capacity, which a segment queued by
// Epoch::queueNextFed with room for as many is; it is adopted fed as far as it was, feeding on.
std::shared_ptr<EpochState> adoptPending(LoaderCore& c, std::int64_t e, const std::vector<std::int64_t>* order,
                                         const std::vector<std::int64_t>* begins, std::int64_t fedCapacity) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.pending) return nullptr;
  EpochState& s = *c.pending;
  std::lock_guard<std::mutex> stateLock(s.mutex);
  const EpochSegment& next = *s.segments.back();
  const bool same = fedCapacity >= 0 ? next.fed && static_cast<std::int64_t>(next.order.capacity()) >= fedCapacity
                   : next.fed      ? false
                   : order         ? next.order == *order && next.batchBegin == *begins
                                   : next.samplerOrder;
  if (s.stopped || !s.handedOver || next.epoch != e || !same) return nullptr;
  s.generation.fetch_add(1);
  s.handedOver = false;
  s.epoch = e;
  s.segmentFirst = next.firstBatch;
  s.segments.erase(s.segments.begin(), s.segments.end() - 1);  // workers hold what they still read
  // The consumer's per-epoch figures start over; the ring, the workers and the batches made go on.
  s.started = false;
  s.waitingFor = -1;
  s.waitTotal = 0;
  s.samples = s.bytes = 0;
  s.stageTotals = {};
  s.stagedBatches = s.skipped = 0;
  s.firstSkipped.clear();
  s.window = TelemetryWindow{};
  std::shared_ptr<EpochState> adopted = std::move(c.pending);
  c.running = adopted;
  return adopted;
}

}  // namespace

void discardPending(LoaderCore& c) {
  std::shared_ptr<EpochState> pending;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    pending.swap(c.pending);
  }
  if (!pending) return;
  {
    std::lock_guard<std::mutex> lock(pending->mutex);
    pending->stopped = true;
  }
  pending->workCv.notify_all();
  if (c.workers) c.workers->join();
  std::vector<Produced> leftover;  // freed outside the lock
  std::lock_guard<std::mutex> lock(pending->mutex);
  leftover.swap(pending->slots);
  pending->heldForReuse.reset();
  pending->finished = true;
}

namespace {

// A resident batch on CUDA is one kernel launch (data/cuda_gather), queued in ~10 us: next() makes it
// on the consumer's own thread and the GPU's queue is the prefetch. Handing it to a worker cost
// more than the launch (a wake-up, the ring's locks, a stream per worker the GPU switches between):
// 55 % of a device copy through 4 workers on an H200 against 90 % for the kernel alone.
// STOKER_RESIDENT_WORKERS=1 keeps the workers (to measure one against the other).
bool launchesOnConsumer(const LoaderCore& c) {
  if (c.mode != LoadingMode::Resident || c.device->kind() != DeviceKind::Cuda) return false;
  const char* env = std::getenv("STOKER_RESIDENT_WORKERS");
  return !(env && std::string(env) == "1");
}

}  // namespace

Epoch Loader::startEpoch(std::int64_t e, std::vector<std::int64_t> order, std::vector<std::int64_t> begins, bool fed) {
  LoaderCore& c = *core_;
  if (!fed)
    if (std::shared_ptr<EpochState> adopted = adoptPending(c, e, &order, &begins)) return Epoch(std::move(adopted));
  discardPending(c);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto running = c.running.lock()) {
      std::lock_guard<std::mutex> stateLock(running->mutex);
      if (!running->finished)
        throwBadInput("epoch " + std::to_string(e), "epoch " + std::to_string(running->epoch) +
                                                        " is still being iterated; finish or destroy it first");
    }
  }
  auto s = std::make_shared<EpochState>();
  s->core = core_;
  s->epoch = e;
  auto segment = std::make_shared<EpochSegment>();
  segment->epoch = e;
  segment->order = std::move(order);
  segment->batchBegin = std::move(begins);
  s->batchCount = static_cast<std::int64_t>(segment->batchBegin.size()) - 1;
  s->segments.push_back(std::move(segment));
  s->fed = fed;
  s->feedOpen = fed;
  s->depth = chooseDepth(c);
  s->workerCount = launchesOnConsumer(c) ? 0 : c.options.num_workers;
  s->slots.resize(static_cast<std::size_t>(s->depth));
  s->status.reset(new WorkerStatus[static_cast<std::size_t>(s->workerCount + 1)]);  // workers, then the consumer
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.depth = s->depth;
    c.running = s;
  }
  if (c.workers && s->workerCount > 0) {
    std::shared_ptr<EpochState> state = s;
    c.workers->run([state](int w) { workerLoop(state, w); });
  }
  return Epoch(s);
}

Batch Loader::fetch(const std::vector<std::int64_t>& indices, std::int64_t epoch) const {
  const LoaderCore& c = *core_;
  const auto count = static_cast<std::int64_t>(indices.size());
  const std::int64_t n = c.dataset->size();
  for (auto i : indices)
    if (i < 0 || i >= n) throwBadInput("sample " + std::to_string(i), "out of range for " + std::to_string(n) + " samples");
  Batch batch;
  batch.epoch = epoch;
  batch.indices = at::empty({count}, at::kLong);
  std::copy(indices.begin(), indices.end(), batch.indices.data_ptr<std::int64_t>());
  std::vector<at::Tensor> host;
  std::vector<std::uint8_t*> dst;
  if (c.mode != LoadingMode::Resident) {
    for (const auto& f : c.fields) {
      host.push_back(at::empty({std::max<std::int64_t>(count * f.sampleBytes, 1)}, at::kByte));
      dst.push_back(host.back().data_ptr<std::uint8_t>());
    }
    if (count > 0) c.dataset->readBatch(indices.data(), count, dst.data());
  }
  for (std::size_t f = 0; f < c.fields.size(); ++f) {
    const FieldSpec& spec = c.fields[f];
    at::Tensor raw = !host.empty() && c.device->isHost() ? host[f]  // read straight into the batch
                                                          : c.device->allocateBytes(std::max<std::int64_t>(count * spec.sampleBytes, 1));
    if (c.mode == LoadingMode::Resident) c.gatherResident(f, indices.data(), count, raw.data_ptr());
    else if (!c.device->isHost()) c.device->copyToDevice(raw.data_ptr(), host[f].data_ptr(), count * spec.sampleBytes, false);
    std::vector<std::int64_t> shape{count};
    shape.insert(shape.end(), spec.sampleShape.begin(), spec.sampleShape.end());
    batch.names.push_back(spec.name);
    batch.tensors.push_back(at::for_blob(raw.data_ptr(), shape)
                                .deleter([raw](void*) {})
                                .options(at::TensorOptions().dtype(spec.dtype).device(c.device->torchDevice()))
                                .target_device(c.device->torchDevice())  // named: no pointer query
                                .make_tensor());
  }
  // Ready on the caller's stream (CUDA: it waits on this thread's copy stream; the CPU does not).
  if (auto queued = c.device->fenceQueuedWork()) c.device->orderAfter(*queued);
  return batch;
}

LoadingMode Loader::mode() const { return core_->mode; }
const std::vector<at::Tensor>& Loader::residentFields() const {
  static const std::vector<at::Tensor> none;
  return core_->mode == LoadingMode::Resident ? core_->resident : none;
}
int Loader::prefetchDepth() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->depth;
}
std::int64_t Loader::batchesPerEpoch() const {
  const LoaderOptions& o = core_->options;
  const std::int64_t n = sampledPerEpoch();
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}
std::int64_t Loader::sampledPerEpoch() const {
  const LoaderOptions& o = core_->options;
  std::int64_t n = core_->dataset->size();
  // A dataset with its own order (WebDataset): its epoch-0 order's length (a rank's share of the
  // shards can change by a shard's samples from epoch to epoch).
  {
    std::lock_guard<std::mutex> lock(core_->mutex);
    if (core_->ownOrderLength) return *core_->ownOrderLength;
  }
  if (auto own = core_->dataset->ownEpochLength(o, 0)) {  // the sample-order knobs cannot be retuned
    std::lock_guard<std::mutex> lock(core_->mutex);
    core_->ownOrderLength = *own;
    return *core_->ownOrderLength;
  }
  if (o.sampler_type == SamplerType::Distributed)
    n = distributedSamplesPerRank({n, o.shard_rank, o.shard_world_size, o.shuffle, o.seed, o.drop_last});
  else if (o.sampler_type == SamplerType::RandomWithReplacement || o.sampler_type == SamplerType::Weighted) {
    if (o.num_samples > 0) n = o.num_samples;
    if (o.shard_world_size > 1)  // the draws dealt across the ranks (sampler.cpp's shareOfDraws)
      n = distributedSamplesPerRank({n, o.shard_rank, o.shard_world_size, false, o.seed, o.drop_last});
  }
  return n;
}
std::int64_t Loader::samplesPerEpoch() const {
  const std::int64_t n = sampledPerEpoch();
  return core_->options.drop_last ? n / core_->options.batch_size * core_->options.batch_size : n;
}
const LoaderOptions& Loader::options() const { return core_->options; }
const Dataset& Loader::dataset() const { return *core_->dataset; }
DeviceBackend& Loader::device() const { return *core_->device; }
DeviceMemory Loader::memory() const { return core_->memory(); }
EpochSummary Loader::lastEpoch() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->last;
}
std::vector<std::string> Loader::notes() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->notes;
}
std::vector<std::string> Loader::advice() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->advice;
}
std::int64_t Loader::poolAllocations() const {
  return core_->outputPool->allocations() + (core_->stagingPool ? core_->stagingPool->allocations() : 0);
}

}  // namespace stoker
