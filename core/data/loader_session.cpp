#include "data/loader_session.h"

#include <chrono>
#include <exception>
#include <mutex>
#include <thread>

#include "data/loader_sweep.h"
#include "data/sampler.h"
#include "util/busy_work.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {

struct LoaderSession::DeviceRun {
  std::string device;
  DeviceSpec spec;
  std::size_t index = 0;
  std::unique_ptr<Loader> loader;
  std::vector<EpochSummary> epochs;  // since the last retune
  std::uint64_t generation = 0;      // of the options this device runs with
  // Epoch `orderEpoch`'s whole order, kept at its first retune between batches for the ones after.
  std::int64_t orderEpoch = -1;
  std::vector<std::int64_t> order;
};

namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool onlyBatchKnobs(const LoaderOptions& a, const LoaderOptions& b) {
  for (const auto& k : changedKnobs(a, b))
    if (!isBatchBoundaryKnob(k)) return false;
  return true;
}

}  // namespace

double steadyRate(const std::vector<EpochSummary>& epochs, bool bytes) {
  double amount = 0, seconds = 0;
  for (std::size_t i = epochs.size() > 1 ? 1 : 0; i < epochs.size(); ++i) {
    amount += static_cast<double>(bytes ? epochs[i].bytes : epochs[i].samples);
    seconds += epochs[i].seconds;
  }
  return seconds > 0 ? amount / seconds : 0;
}

void checkSplittable(const LoaderOptions& o, int devices) {
  const std::string n = std::to_string(devices);
  if (o.sampler_type == SamplerType::Weighted || o.sampler_type == SamplerType::RandomWithReplacement)
    throwBadInput("sampler_type", samplerTypeName(o.sampler_type) + " sampling cannot be split across " + n +
                                      " devices (each device runs a distributed shard); use random or sequential, "
                                      "or one device");
  if (o.sampler_type == SamplerType::Distributed && (o.shard_world_size != 1 || o.shard_rank != 0))
    throwBadInput("shard_world_size", "with " + n + " devices each device is one shard (rank = its position); set "
                                      "shard_rank 0 and shard_world_size 1, or run one device per process");
}

LoaderSession::LoaderSession(std::shared_ptr<Dataset> dataset, const LoaderOptions& options,
                             const std::vector<DeviceSpec>& devices, LoaderSessionOptions session)
    : dataset_(std::move(dataset)), options_(options), session_(std::move(session)), deviceCount_(devices.size()),
      pending_(options), datasetOptions_(options) {
  if (session_.epochs < 0)
    throwBadInput("epochs", "must be at least 1, or 0 to run until stopped (got " + std::to_string(session_.epochs) + ")");
  requireBusyMicros("step", session_.stepMicros);
  if (devices.empty()) throwBadInput("device", "no device given");
  if (devices.size() > 1) checkSplittable(options_, static_cast<int>(devices.size()));
  for (std::size_t d = 0; d < devices.size(); ++d) {
    auto run = std::make_unique<DeviceRun>();
    run->device = devices[d].name();
    run->spec = devices[d];
    run->index = d;
    run->loader = std::make_unique<Loader>(dataset_, deviceOptions(options_, d), DeviceBackend::create(devices[d], session_.sim),
                                           session_.openCancel);
    for (const auto& observer : session_.observers) run->loader->addObserver(observer);
    if (session_.raiseWorkersForNetwork && run->loader->raiseWorkersForNetwork(*session_.raiseWorkersForNetwork)) {
      // Every device's loader reads the same dataset: they raise alike, and a retune starts from these.
      options_.num_workers = run->loader->options().num_workers;
      options_.prefetch = run->loader->options().prefetch;
    }
    runs_.push_back(std::move(run));
  }
  pending_ = options_;
  datasetOptions_ = options_;
}

LoaderSession::~LoaderSession() = default;

// Several devices: one distributed shard per device; sequential stays in
// order on every shard.
LoaderOptions LoaderSession::deviceOptions(const LoaderOptions& options, std::size_t d) const {
  LoaderOptions o = options;
  if (deviceCount_ > 1) {
    if (o.sampler_type == SamplerType::Sequential) o.shuffle = false;
    o.sampler_type = SamplerType::Distributed;
    o.shard_rank = static_cast<int>(d);
    o.shard_world_size = static_cast<int>(deviceCount_);
  }
  return o;
}

std::vector<std::string> LoaderSession::notes() const {
  std::vector<std::string> out;
  for (const auto& r : runs_)
    for (const auto& n : r->loader->notes()) out.push_back(r->device + ": " + n);
  return out;
}

int LoaderSession::networkWorkers() const { return runs_.front()->loader->networkWorkers(); }

std::uint64_t LoaderSession::totalBytes() const {
  if (session_.epochs == 0) return 0;  // until stopped: no end to count towards
  std::uint64_t total = 0;
  for (const auto& r : runs_)
    total += static_cast<std::uint64_t>(r->loader->samplesPerEpoch() * dataset_->sampleBytes() * session_.epochs);
  return total;
}

void LoaderSession::retune(const LoaderOptions& next) {
  validateLoaderOptions(next);
  if (deviceCount_ > 1) checkSplittable(next, static_cast<int>(deviceCount_));
  if (datasetKnobsDiffer(options_, next) && !session_.reopen)
    throwBadInput("reader_mode", "this run cannot re-open its dataset; change the reader settings between runs");
  std::lock_guard<std::mutex> lock(liveMutex_);
  checkSamplerFits(next, dataset_->size());
  pending_ = next;
  latestGeneration_.store(++generation_);
}

std::shared_ptr<Dataset> LoaderSession::datasetFor(const LoaderOptions& o, std::uint64_t generation) {
  std::lock_guard<std::mutex> lock(liveMutex_);
  // Devices share one re-opened dataset per retune.
  if (datasetKnobsDiffer(datasetOptions_, o) && datasetGeneration_ != generation) {
    dataset_.reset();  // the old one's memory goes first (the loaders still hold theirs until rebuilt)
    dataset_ = session_.reopen(o);
    datasetOptions_ = o;
    datasetGeneration_ = generation;
  }
  return dataset_;
}

// Batch-boundary knobs only: stop the epoch where it is, retune the loader,
// and serve the rest of the same order from a fed epoch.
void LoaderSession::applyAtBatch(DeviceRun& r, std::optional<Epoch>& epoch, std::int64_t e, std::int64_t served) {
  if (latestGeneration_.load() == r.generation) return;  // the common case, without the lock
  LoaderOptions next;
  std::uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(liveMutex_);
    if (generation_ == r.generation) return;
    next = deviceOptions(pending_, r.index);
    generation = generation_;
  }
  const LoaderOptions current = r.loader->options();
  if (!onlyBatchKnobs(current, next)) return;  // waits for the epoch's end
  // The rest of the order the epoch is serving, not a new draw of it: a dataset's own order may do
  // more than return indices when drawn (a remote WebDataset plans its reads for the epoch, and a
  // second draw of epoch e counts as a new start: what it kept goes, what was read is read again).
  if (r.orderEpoch != e) {
    r.order = epoch->order();  // the sampler's: batch knobs do not change it
    r.orderEpoch = e;
  }
  epoch->stop();
  r.loader->retune(next);
  r.generation = generation;
  r.epochs.clear();  // rates count from the change
  const std::vector<std::int64_t>& order = r.order;
  const auto total = std::min<std::int64_t>(r.loader->samplesPerEpoch(), static_cast<std::int64_t>(order.size()));
  const std::int64_t rest = std::max<std::int64_t>(0, total - served);
  if (rest > 0) r.loader->dataset().ownEpochRest(e, order.data() + served, rest);
  epoch.emplace(r.loader->openEpoch(e, rest));
  if (rest > 0) epoch->feed(order.data() + served, rest, next.batch_size);
  epoch->closeFeed();
  if (session_.onRetuned) session_.onRetuned({r.device, describeChange(current, next), unixNow(), false});
}

void LoaderSession::applyAtEpochEnd(DeviceRun& r, const CancelToken* cancel) {
  LoaderOptions next, given;
  std::uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(liveMutex_);
    if (generation_ == r.generation) return;
    given = pending_;
    next = deviceOptions(pending_, r.index);
    generation = generation_;
  }
  const LoaderOptions current = r.loader->options();
  if (onlyBatchKnobs(current, next)) {
    r.loader->retune(next);
  } else {
    auto dataset = datasetFor(given, generation);
    r.loader.reset();  // its pools and resident copy go before the new loader takes its own
    r.loader = std::make_unique<Loader>(dataset, next, DeviceBackend::create(r.spec, session_.sim), cancel);
    for (const auto& observer : session_.observers) r.loader->addObserver(observer);
  }
  r.generation = generation;
  r.epochs.clear();
  if (session_.onRetuned) session_.onRetuned({r.device, describeChange(current, next), unixNow(), true});
}

void LoaderSession::drive(DeviceRun& r, ProgressMeter& meter, const CancelToken* cancel, CancelToken& stopAll) {
  const bool untilStopped = session_.epochs == 0;
  for (std::int64_t e = 0; untilStopped || e < session_.epochs; ++e) {
    try {
      applyAtEpochEnd(r, cancel);  // a new loader may decode a resident dataset: Stop interrupts it
    } catch (const Error& error) {
      if (!(untilStopped && error.kind() == ErrorKind::Cancelled)) throw;
      userStopped_ = true;
      stopAll.cancel();
      return;
    }
    r.loader->setCancelToken(&stopAll);
    const std::string item = r.device + " epoch " + std::to_string(e);
    std::optional<Epoch> epoch;
    // The workers go on into the next epoch before this one ends, as a training loop's persistent
    // workers do, so the run does not drain the ring at every boundary. A retune at the boundary
    // (applyAtEpochEnd) drops what was made ahead.
    const bool another = untilStopped || e + 1 < session_.epochs;
    epoch.emplace(r.loader->epoch(e, another ? Loader::Lookahead::NextEpoch : Loader::Lookahead::Off));
    std::int64_t served = 0;
    try {
      while (auto batch = epoch->next()) {
        // Places of the order this batch took: a whole batch, also one that skip_bad_samples made
        // short (its rows undercounted them, and a retune served the last ones again). The last
        // batch may count past the order's end: the rest is then empty, as it should be.
        served += r.loader->options().batch_size;
        meter.add(static_cast<std::uint64_t>(batch->nbytes()), item);
        busyWork(session_.stepMicros);
        if (cancel && cancel->cancelled()) {
          userStopped_ = true;
          stopAll.cancel();
        }
        applyAtBatch(r, epoch, e, served);
      }
    } catch (const Error& error) {
      // Stop is how an until-stopped run ends: keep what the epoch measured.
      if (untilStopped && error.kind() == ErrorKind::Cancelled && userStopped_) {
        if (r.loader->lastEpoch().batches > 0) r.epochs.push_back(r.loader->lastEpoch());
        return;
      }
      throw;
    }
    // An epoch without a batch would repeat forever in an until-stopped run (no batch, no look at
    // Stop) and measures nothing in a counted one: say why instead.
    if (served == 0 && r.loader->lastEpoch().batches == 0)
      throwBadInput(r.device + " epoch " + std::to_string(e),
                    "served no batch: " + std::to_string(r.loader->dataset().size()) + " samples" +
                        (r.loader->options().drop_last ? " make no whole batch of " + std::to_string(r.loader->options().batch_size) +
                                                             " (drop_last): lower batch_size or turn drop_last off"
                                                       : " and no batch came"));
    r.epochs.push_back(r.loader->lastEpoch());
  }
}

LoaderSessionResult LoaderSession::run(ProgressSink* progress, const CancelToken* cancel) {
  // A token of our own lets one device's failure stop the others; the
  // caller's token is forwarded to it by polling between batches.
  CancelToken stopAll;
  userStopped_ = false;
  ProgressMeter meter(progress, totalBytes());
  std::mutex errorMutex;
  std::exception_ptr error;
  auto driveOne = [&](DeviceRun& r) {
    try {
      drive(r, meter, cancel, stopAll);
    } catch (...) {
      stopAll.cancel();
      std::lock_guard<std::mutex> lock(errorMutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < runs_.size(); ++i) threads.emplace_back(driveOne, std::ref(*runs_[i]));
  driveOne(*runs_[0]);
  for (auto& t : threads) t.join();
  for (auto& r : runs_)
    if (r->loader) r->loader->setCancelToken(nullptr);  // a failed rebuild leaves none
  if (error) std::rethrow_exception(error);
  meter.finish();

  LoaderSessionResult result;
  for (auto& r : runs_) {
    DeviceRunResult d;
    d.device = r->device;
    if (r->loader) {  // none when Stop interrupted its rebuild at an epoch's end
      d.mode = r->loader->mode();
      d.prefetchDepth = r->loader->prefetchDepth();
      d.memory = r->loader->memory();
      d.notes = r->loader->notes();
    }
    d.epochs = std::move(r->epochs);
    r->epochs.clear();
    d.samplesPerS = steadyRate(d.epochs, false);
    d.bytesPerS = steadyRate(d.epochs, true);
    result.samplesPerS += d.samplesPerS;
    result.bytesPerS += d.bytesPerS;
    result.devices.push_back(std::move(d));
  }
  return result;
}

}  // namespace stoker
