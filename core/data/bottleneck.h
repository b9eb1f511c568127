// data/bottleneck: what limits a loader run right now, in words, and the knob
// most likely to help -- the Loader workspace's bottleneck panel. Reads the
// share of each iteration the consumer waits for data (telemetry/input_bound)
// and the loader's settings; streaming records' per-stage times name the stage
// the workers spend most on (telemetry/stage_verdict).
#pragma once

#include <string>

#include "data/loader_options.h"
#include "telemetry/input_bound.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

struct Bottleneck {
  InputBound kind = InputBound::Unknown;
  double waitShare = -1;  // data_wait / (data_wait + step), -1 unknown
  std::string headline;   // what limits the run
  std::string knob;       // the knob most likely to help ("" when none would)
  std::string advice;     // what to do, naming the knob and a value to try
};

// `cores`: the machine's hardware threads (workers beyond cores - 1 only contend).
// `networkWorkers`: for a dataset whose batches wait on the network (Loader::networkWorkers), the
// workers that keep it busy -- they wait rather than compute, so cores do not bound them; 0 otherwise.
Bottleneck diagnoseBottleneck(const TelemetryRecord& r, const LoaderOptions& o, int cores, int networkWorkers = 0);

}  // namespace stoker
