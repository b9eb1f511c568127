#include "data/loader_session.h"

#include <exception>
#include <mutex>
#include <thread>

#include "util/busy_work.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {

struct LoaderSession::DeviceRun {
  std::string device;
  std::unique_ptr<Loader> loader;
  std::vector<EpochSummary> epochs;
};

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
    : dataset_(std::move(dataset)), options_(options), session_(std::move(session)) {
  if (session_.epochs < 1) throwBadInput("epochs", "must be at least 1 (got " + std::to_string(session_.epochs) + ")");
  if (session_.stepMicros < 0) throwBadInput("step", "must be non-negative");
  if (devices.empty()) throwBadInput("device", "no device given");
  if (devices.size() > 1) checkSplittable(options_, static_cast<int>(devices.size()));
  for (std::size_t d = 0; d < devices.size(); ++d) {
    LoaderOptions o = options_;
    if (devices.size() > 1) {  // one shard of the dataset per device
      if (o.sampler_type == SamplerType::Sequential) o.shuffle = false;  // each shard in order
      o.sampler_type = SamplerType::Distributed;
      o.shard_rank = static_cast<int>(d);
      o.shard_world_size = static_cast<int>(devices.size());
    }
    auto run = std::make_unique<DeviceRun>();
    run->device = devices[d].name();
    run->loader = std::make_unique<Loader>(dataset_, o, DeviceBackend::create(devices[d], session_.sim));
    for (const auto& observer : session_.observers) run->loader->addObserver(observer);
    runs_.push_back(std::move(run));
  }
}

LoaderSession::~LoaderSession() = default;

std::vector<std::string> LoaderSession::notes() const {
  std::vector<std::string> out;
  for (const auto& r : runs_)
    for (const auto& n : r->loader->notes()) out.push_back(r->device + ": " + n);
  return out;
}

std::uint64_t LoaderSession::totalBytes() const {
  std::uint64_t total = 0;
  for (const auto& r : runs_)
    total += static_cast<std::uint64_t>(r->loader->samplesPerEpoch() * dataset_->sampleBytes() * session_.epochs);
  return total;
}

LoaderSessionResult LoaderSession::run(ProgressSink* progress, const CancelToken* cancel) {
  // A token of our own lets one device's failure stop the others; the
  // caller's token is forwarded to it by polling between batches.
  CancelToken stopAll;
  for (auto& r : runs_) r->loader->setCancelToken(&stopAll);
  ProgressMeter meter(progress, totalBytes());
  std::mutex errorMutex;
  std::exception_ptr error;
  auto drive = [&](DeviceRun& r) {
    try {
      for (int e = 0; e < session_.epochs; ++e) {
        const std::string item = r.device + " epoch " + std::to_string(e);
        Epoch epoch = r.loader->epoch(e);
        while (auto batch = epoch.next()) {
          meter.add(static_cast<std::uint64_t>(batch->nbytes()), item);
          busyWork(session_.stepMicros);
          if (cancel && cancel->cancelled()) stopAll.cancel();
        }
        r.epochs.push_back(r.loader->lastEpoch());
      }
    } catch (...) {
      stopAll.cancel();
      std::lock_guard<std::mutex> lock(errorMutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < runs_.size(); ++i) threads.emplace_back(drive, std::ref(*runs_[i]));
  drive(*runs_[0]);
  for (auto& t : threads) t.join();
  for (auto& r : runs_) r->loader->setCancelToken(nullptr);
  if (error) std::rethrow_exception(error);
  meter.finish();

  LoaderSessionResult result;
  for (auto& r : runs_) {
    DeviceRunResult d;
    d.device = r->device;
    d.mode = r->loader->mode();
    d.prefetchDepth = r->loader->prefetchDepth();
    d.memory = r->loader->memory();
    d.notes = r->loader->notes();
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
