#include "telemetry/stage_verdict.h"

#include <cmath>
#include <cstdio>

namespace stoker {

std::string stageWords(const std::string& stage) {
  if (stage == "read") return "reading from storage or the network";  // remote datasets time their requests as read
  if (stage == "decode") return "JPEG/PNG decode";
  if (stage == "transform") return "transforms (crop, resize, flip, normalise)";
  if (stage == "collate") return "collating samples into batches";
  if (stage == "copy") return "copying to the device";
  return stage;
}

StageVerdict stageVerdict(const std::map<std::string, double>& stages) {
  StageVerdict v;
  double total = 0, best = -1;
  for (const auto& [stage, t] : stages) {
    if (!(t >= 0) || !std::isfinite(t)) continue;
    total += t;
    if (t > best) {
      best = t;
      v.stage = stage;
    }
  }
  if (total <= 0 || v.stage.empty()) {
    v.stage.clear();
    v.text = "no stage timings (resident batches are one gather)";
    return v;
  }
  v.share = best / total;
  char text[160];
  std::snprintf(text, sizeof text, "%s-bound: %.0f %% of worker time in %s", v.stage.c_str(), 100 * v.share,
                stageWords(v.stage).c_str());
  v.text = text;
  return v;
}

}  // namespace stoker
