// data/loader_measure: one trustworthy throughput figure for a loader setting.
// Runs the loader until stopped, drops a warm-up, then reads its telemetry
// windows (50 ms each) until the 95 % confidence interval of the mean rate
// is within the target (e.g. +-3 %) or a time cap is reached. Sweeps and the
// auto-tuner measure every point this way, and call two settings different
// only when their intervals do not overlap.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/loader_session.h"
#include "data/measure_spec.h"

namespace stoker {

struct Measurement {
  double samplesPerS = 0;  // 10 % trimmed mean of the windows' rates (summed over devices)
  double bytesPerS = 0;
  double median = 0, p10 = 0, p90 = 0;  // of the windows (summed over devices by their means' shares)
  double ciHalfWidth = 0;  // 95 % interval of the mean, samples/s
  int windows = 0;         // measured (after the warm-up), all devices
  double seconds = 0;      // measuring, after the warm-up
  bool converged = false;  // reached the target before the cap
  std::string mode;        // of the first device
  double relativeCi() const { return samplesPerS > 0 ? ciHalfWidth / samplesPerS : 1; }
};

// Throws what LoaderSession throws (Cancelled when `cancel` fires).
Measurement measureLoader(std::shared_ptr<Dataset> dataset, const LoaderOptions& options,
                          const std::vector<DeviceSpec>& devices, const LoaderSessionOptions& session,
                          const MeasureSpec& spec, const CancelToken* cancel);

// Whether the two 95 % intervals are disjoint.
bool clearlyDifferent(const Measurement& a, const Measurement& b);

}  // namespace stoker
