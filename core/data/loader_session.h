// data/loader_session: runs the loader for some epochs on one or more
// devices, the way `stoker bench` and the workbench's Run button do: one
// Loader per device (each on its own shard when there are several), each
// driven by a thread of its own, with an optional simulated training step per
// batch. Progress goes to a ProgressSink in bytes, a CancelToken stops it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/device.h"
#include "data/loader.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class CancelToken;
class ProgressMeter;
class ProgressSink;

// A retune as a device applied it (LoaderSession::retune).
struct RetuneApplied {
  std::string device;
  std::string change;   // "num_workers 1 → 2, prefetch 4 → 8"
  double time = 0;      // Unix seconds, the clock of telemetry records
  bool atEpochEnd = false;  // it waited for the epoch's end (sample-order knobs)
};

struct LoaderSessionOptions {
  int epochs = 3;         // 0: until cancelled; run() then returns what it measured
  double stepMicros = 0;  // busy work per batch: the consumer's "training step"
  SimDeviceConfig sim;
  std::vector<std::shared_ptr<TelemetryObserver>> observers;
  // Opens the dataset again when a retune changes a dataset-level knob
  // (reader_mode, part_size, max_inflight_parts); without it such a retune
  // is refused.
  std::function<std::shared_ptr<Dataset>(const LoaderOptions&)> reopen;
  // Called on each device's thread once it runs with retuned options.
  std::function<void(const RetuneApplied&)> onRetuned;
  // Polled while the constructor opens the loaders (a resident dataset being
  // decoded): Stop during a long open throws Error(Cancelled) at once.
  const CancelToken* openCancel = nullptr;
  // Set when the user did not choose num_workers: a loader whose batches wait on the network gets
  // more (Loader::raiseWorkersForNetwork with this many batches a worker in the ring; 0 when the
  // user chose the ring's depth), and options() says how many.
  std::optional<int> raiseWorkersForNetwork;
};

struct DeviceRunResult {
  std::string device;
  LoadingMode mode = LoadingMode::Streaming;
  int prefetchDepth = 0;
  DeviceMemory memory;
  std::vector<std::string> notes;
  std::vector<EpochSummary> epochs;
  double samplesPerS = 0;  // steady state (epochs after the first)
  double bytesPerS = 0;
};

struct LoaderSessionResult {
  std::vector<DeviceRunResult> devices;
  double samplesPerS = 0;  // summed over devices
  double bytesPerS = 0;
};

// Steady state rate: epochs after the first (which pays page faults and pool
// growth), or the only epoch.
double steadyRate(const std::vector<EpochSummary>& epochs, bool bytes);

// Several devices each run one distributed shard (rank = position). Throws
// Error(BadInput) naming the knob for options that cannot be split that way:
// weighted or with-replacement sampling, or a shard of a larger world.
void checkSplittable(const LoaderOptions& o, int devices);

class LoaderSession {
 public:
  // Opens one loader per device now (mode choice, resident upload), so
  // notes() and totalBytes() are known before run(). Throws what Loader does.
  LoaderSession(std::shared_ptr<Dataset> dataset, const LoaderOptions& options, const std::vector<DeviceSpec>& devices,
                LoaderSessionOptions session);
  ~LoaderSession();
  LoaderSession(const LoaderSession&) = delete;
  LoaderSession& operator=(const LoaderSession&) = delete;

  // The options the loaders run with: those given, with what raiseWorkersForNetwork raised.
  const LoaderOptions& options() const { return options_; }
  // "device: note" lines of every loader.
  std::vector<std::string> notes() const;
  // Loader::networkWorkers of the first device's loader (they read the same dataset alike).
  int networkWorkers() const;
  // Bytes all epochs on all devices will hand out (the progress total).
  std::uint64_t totalBytes() const;
  // Runs every device to the end; the first error (Cancelled included, but
  // for an until-cancelled run) stops the others and is rethrown. Each
  // device's rate counts the epochs after the first since its last retune.
  LoaderSessionResult run(ProgressSink* progress, const CancelToken* cancel);

  // From any thread while run() runs: every device takes `next` at its next
  // safe point -- the next batch when only batch-boundary knobs change
  // (Loader::retune; the epoch goes on with the same samples in the same
  // order), the epoch's end otherwise (a new Loader, the dataset re-opened
  // for dataset-level knobs). A later retune replaces one not yet applied.
  // Throws Error(BadInput) naming the knob when `next` is invalid here.
  void retune(const LoaderOptions& next);

 private:
  struct DeviceRun;
  void drive(DeviceRun& r, ProgressMeter& meter, const CancelToken* cancel, CancelToken& stopAll);
  void applyAtBatch(DeviceRun& r, std::optional<Epoch>& epoch, std::int64_t e, std::int64_t served);
  void applyAtEpochEnd(DeviceRun& r, const CancelToken* cancel);
  LoaderOptions deviceOptions(const LoaderOptions& o, std::size_t device) const;
  std::shared_ptr<Dataset> datasetFor(const LoaderOptions& o, std::uint64_t generation);

  std::shared_ptr<Dataset> dataset_;
  LoaderOptions options_;
  LoaderSessionOptions session_;
  std::vector<std::unique_ptr<DeviceRun>> runs_;
  std::size_t deviceCount_ = 1;
  std::atomic<bool> userStopped_{false};
  std::atomic<std::uint64_t> latestGeneration_{0};  // generation_, read without the lock

  std::mutex liveMutex_;  // guards the members below
  LoaderOptions pending_;
  std::uint64_t generation_ = 0;  // of pending_; 0: the options given at construction
  std::uint64_t datasetGeneration_ = 0;
  LoaderOptions datasetOptions_;  // what dataset_ was opened with (as far as dataset knobs go)
};

}  // namespace stoker
