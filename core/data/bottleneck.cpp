#include "data/bottleneck.h"

#include "telemetry/stage_verdict.h"

#include <algorithm>
#include <cstdio>

namespace stoker {
namespace {

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100 * share);
  return text;
}

}  // namespace

Bottleneck diagnoseBottleneck(const TelemetryRecord& r, const LoaderOptions& o, int cores, int networkWorkers) {
  Bottleneck b;
  b.waitShare = dataWaitShare(r.data_wait_ms, r.step_ms);
  b.kind = classifyInputBound(b.waitShare);
  if (b.kind == InputBound::Unknown) {
    b.headline = "No timing yet.";
    return b;
  }
  const bool host = r.device == "cpu";
  const bool resident = r.mode == "resident";
  if (b.kind == InputBound::Fine) {
    b.headline = "Compute-bound: the step waits " + percent(b.waitShare) +
                 " of the time for data. The loader keeps up; loader knobs will not make this run faster.";
    return b;
  }
  // Waiting for data. With no training step at all the loader is all there is.
  if (r.step_ms < 0.01)
    b.headline = "Input-bound by construction: there is no training step (Step is 0), so this measures the loader "
                 "alone. Set Step to your model's step time to see whether the input keeps up.";
  else
    b.headline = std::string(b.kind == InputBound::InputBound ? "Input-bound" : "Partly input-bound") + ": the step waits " +
                 percent(b.waitShare) + " of the time for data (" + std::to_string(static_cast<int>(r.data_wait_ms + 0.5)) +
                 " ms a batch).";
  const int usefulWorkers = std::max(1, cores - 1);  // the consumer helps too
  if (resident) {
    b.knob = "num_workers";
    b.advice = o.num_workers < usefulWorkers
                   ? "Gathering on the device limits it: raise num_workers (" + std::to_string(o.num_workers) + " \u2192 " +
                         std::to_string(o.num_workers + 1) + ")."
                   : "Resident gathers are at this machine's limit; a larger batch_size amortises each gather.";
    if (o.num_workers >= usefulWorkers) b.knob = "batch_size";
    return b;
  }
  if (networkWorkers > 0) {
    // Each batch waits a round trip to the server, one batch a worker: the cores are idle, so
    // "every core is reading" would send the user the wrong way.
    b.knob = "num_workers";
    b.advice = o.num_workers < networkWorkers
                   ? "Each batch waits a round trip to the server, one batch a worker: raise num_workers (" +
                         std::to_string(o.num_workers) + " \u2192 " + std::to_string(networkWorkers) +
                         "). They are threads that wait, so more of them than cores help."
                   : "The workers wait on the server: more of them still help (`stoker tune` tries up to 64), and "
                     "cache_dir reads later epochs from local disk.";
    if (o.num_workers >= networkWorkers) b.knob = "cache_dir";
  } else if (o.num_workers < usefulWorkers) {
    b.knob = "num_workers";
    b.advice = "Reading and collating limit it: raise num_workers (" + std::to_string(o.num_workers) + " \u2192 " +
               std::to_string(o.num_workers + 1) + "; this machine has " + std::to_string(cores) + " cores).";
  } else if (r.ready == 0 && o.num_workers > 0 && o.prefetch < 4 * o.num_workers) {
    b.knob = "prefetch";
    b.advice = "No batch was ready when asked: raise prefetch (" + std::to_string(o.prefetch) + " \u2192 " +
               std::to_string(o.prefetch * 2) + ") to ride out slow samples.";
  } else if (!host && !o.pin_memory) {
    b.knob = "pin_memory";
    b.advice = "Copies to the device are unpinned: turn pin_memory on.";
  } else if (!host && o.loading_mode != LoadingMode::Resident) {
    b.knob = "loading_mode";
    b.advice = "Workers are busy on every core: if the dataset fits on the device, loading_mode resident gathers "
               "there instead.";
  } else {
    b.advice = "Every core is already reading: make samples cheaper (decode, transforms) or the step does not need "
               "more input than this machine can produce.";
  }
  // Which stage, when the records say (streaming batches carry stages_ms).
  if (!r.stages_ms.empty()) {
    const StageVerdict v = stageVerdict(r.stages_ms);
    if (!v.stage.empty()) b.advice += " Workers: " + v.text + ".";
  }
  return b;
}

}  // namespace stoker
