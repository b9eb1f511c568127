#include "tune_json.h"

#include "data/loader_tune.h"

namespace stoker {
namespace {

nlohmann::json measurementJson(const Measurement& m) {
  return {{"samples_per_s", m.samplesPerS}, {"ci95_samples_per_s", m.ciHalfWidth}, {"median", m.median},
          {"p10", m.p10},                   {"p90", m.p90},                       {"windows", m.windows},
          {"seconds", m.seconds},           {"converged", m.converged},           {"mode", m.mode}};
}

}  // namespace

nlohmann::json tuneJson(const TuneResult& r, const std::string& dataset, const std::string& device, double budgetSeconds) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : r.trials)
    trials.push_back({{"change", t.change},
                      {"measurement", measurementJson(t.measurement)},
                      {"error", t.error},
                      {"options", nlohmann::json::parse(loaderOptionsToJson(t.options))}});
  return {{"dataset", dataset},  // its printers (printJson, the C API's answer) hide a URL's secrets
          {"device", device},
          {"budget_s", budgetSeconds},
          {"seconds", r.seconds},
          {"passes", r.passes},
          {"budget_spent", r.budgetSpent},
          {"cancelled", r.cancelled},
          {"best_change", r.bestChange},
          {"best", measurementJson(r.bestMeasurement)},
          {"start", measurementJson(r.startMeasurement)},
          {"within_noise", r.withinNoise},
          {"confidence", r.confidence},
          {"notes", r.notes},
          {"options", nlohmann::json::parse(loaderOptionsToJson(r.best))},
          {"trials", trials}};
}

}  // namespace stoker
