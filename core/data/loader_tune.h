// data/loader_tune: the auto-tuner. Given a time budget, searches num_workers,
// prefetch, batch_size, pin_memory and reuse_buffers by coordinate descent:
// one knob at a time, each candidate measured with measureLoader (warm-up,
// then until +-3 % or a time cap), moving only to a setting that is clearly
// faster (disjoint 95 % intervals), pass after pass until nothing improves or
// the budget is spent (each trial 0.3-4 s, up to 15 s on a remote dataset). A num_workers candidate comes with prefetch raised to
// two batches per worker if it was lower. Knobs that do nothing with the other settings (pinning
// on cpu, prefetch without workers) are skipped. Reports the best setting,
// its interval, how sure the choice is, and every trial.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/loader_measure.h"

namespace stoker {

struct TuneSpec {
  double budgetSeconds = 60;
  // Values to try per knob, in the order the knobs are searched; empty: the
  // defaults for this machine (defaultTuneCandidates).
  std::vector<std::pair<std::string, std::vector<std::string>>> candidates;
  MeasureSpec measure;  // maxSeconds is lowered to fit the budget
  // An s3:// or http(s):// dataset (datasetIsRemote): part_size and max_inflight_parts are searched
  // too, each setting on the dataset opened again with it through `reopen` (openDataset(spec, o)).
  // Not when the trials are resident (decoded once: no read reaches the network) or cache_dir is
  // set (after the first trial every read comes from the cache): a note says so.
  bool remoteDataset = false;
  std::function<std::shared_ptr<Dataset>(const LoaderOptions&)> reopen;
  // A cancel after the starting options were measured returns the search so far (TuneResult::
  // cancelled) instead of throwing: Ctrl-C at 55 s of a 60 s search threw its 20 trials away.
  bool keepOnCancel = false;
};

// num_workers 0..2 x cores (storage latency lets more readers than cores help; at least 4), prefetch
// 1-32, batch_size base/4..base x 4, pin_memory, reuse_buffers; for a remote dataset also part_size
// 1-64 MiB and max_inflight_parts 1-64, and workers up to 64 -- fewer where their batches would
// hold more than remoteWorkerBytes (3 blocks a worker: its own and two in the ring), at least 16.
// `sampleBytes`: one sample's bytes in a batch (Dataset::sampleBytes); 0 = not known, 16 at most.
std::vector<std::pair<std::string, std::vector<std::string>>> defaultTuneCandidates(const LoaderOptions& base, int cores,
                                                                                     bool remoteDataset = false,
                                                                                     std::int64_t sampleBytes = 0);

struct TuneTrial {
  LoaderOptions options;
  std::string change;  // from the start, in words ("" for the start itself)
  Measurement measurement;
  std::string error;   // this setting failed (out of memory, invalid)
};

struct TuneResult {
  LoaderOptions best;
  Measurement bestMeasurement, startMeasurement;
  std::string bestChange;  // from the start, in words
  std::vector<TuneTrial> trials;
  int passes = 0;
  double seconds = 0;
  bool budgetSpent = false;  // stopped by the budget, not because nothing improved
  bool cancelled = false;    // stopped by a cancel (TuneSpec::keepOnCancel): the best so far
  int withinNoise = 0;       // other trials whose interval overlaps the best's
  std::string confidence;    // how sure, in words
  std::vector<std::string> notes;  // e.g. the dataset was decoded once first
};

TuneResult autoTune(std::shared_ptr<Dataset> dataset, const LoaderOptions& base, const std::vector<DeviceSpec>& devices,
                    const LoaderSessionOptions& session, const TuneSpec& spec, const CancelToken* cancel,
                    const std::function<void(const TuneTrial&, double secondsSoFar)>& onTrial);

}  // namespace stoker
