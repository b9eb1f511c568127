// data/loader_session: runs the loader for some epochs on one or more
// devices, the way `stoker bench` and the workbench's Run button do: one
// Loader per device (each on its own shard when there are several), each
// driven by a thread of its own, with an optional simulated training step per
// batch. Progress goes to a ProgressSink in bytes, a CancelToken stops it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/device.h"
#include "data/loader.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class CancelToken;
class ProgressSink;

struct LoaderSessionOptions {
  int epochs = 3;
  double stepMicros = 0;  // busy work per batch: the consumer's "training step"
  SimDeviceConfig sim;
  std::vector<std::shared_ptr<TelemetryObserver>> observers;
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

  // "device: note" lines of every loader.
  std::vector<std::string> notes() const;
  // Bytes all epochs on all devices will hand out (the progress total).
  std::uint64_t totalBytes() const;
  // Runs every device to the end; the first error (Cancelled included)
  // stops the others and is rethrown.
  LoaderSessionResult run(ProgressSink* progress, const CancelToken* cancel);

 private:
  struct DeviceRun;
  std::shared_ptr<Dataset> dataset_;
  LoaderOptions options_;
  LoaderSessionOptions session_;
  std::vector<std::unique_ptr<DeviceRun>> runs_;
};

}  // namespace stoker
