// telemetry/stage_verdict: "which stage starves my GPU" in words, from per-batch stage times
// (telemetry's stages_ms, or an epoch's stage seconds): the stage holding most of the workers'
// time and its share, e.g. "decode-bound: 71 % of worker time in JPEG/PNG decode". Shared by
// `stoker bench`, the Loader workspace and the Monitor.
#pragma once

#include <map>
#include <string>

namespace stoker {

struct StageVerdict {
  std::string stage;   // the dominant stage ("decode"), empty when nothing was measured
  double share = 0;    // of the workers' time, 0-1
  std::string text;    // the sentence
};

// `stages`: time per stage in any unit (ms per batch, seconds per epoch); keys are
// kTelemetryStages. Copy counts as worker time (workers copy when non_blocking).
StageVerdict stageVerdict(const std::map<std::string, double>& stages);
// What a stage does, in words ("JPEG/PNG decode").
std::string stageWords(const std::string& stage);

}  // namespace stoker
