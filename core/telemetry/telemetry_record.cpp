#include "telemetry/telemetry_record.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_number.h"

namespace stoker {

namespace {
// Integral fields must hold an integer that fits; everything else converts as nlohmann does.
template <class T>
void readField(const nlohmann::json& v, T& out, const char* name) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const auto n = jsonInteger<T>(v);
    if (!n) throwBadInput("telemetry", std::string("field \"") + name + "\" is not an integer in range");
    out = *n;
  } else {
    out = v.get<T>();
  }
}
}  // namespace

#define STOKER_TELEMETRY_FIELDS(X)                                                                                   \
  X(time) X(host) X(pid) X(rank) X(worker) X(device) X(epoch) X(step) X(steps_total) X(samples_per_s) X(bytes_per_s) \
  X(batch_latency_p50_ms) X(batch_latency_p99_ms) X(data_wait_ms) X(step_ms) X(prefetch_depth) X(ready) X(mode)     \
  X(mem_used) X(mem_reserved) X(mem_allocated) X(mem_total) X(epoch_end)

std::string telemetryToJson(const TelemetryRecord& r) {
  nlohmann::json j;
#define STOKER_PUT(name) j[#name] = r.name;
  STOKER_TELEMETRY_FIELDS(STOKER_PUT)
#undef STOKER_PUT
  return j.dump();
}

// DESIGN.md's Telemetry section: what every record carries. A record
// without one of them is not telemetry (a zero would be shown as a measured
// value); worker, steps_total and epoch_end default when absent.
#define STOKER_TELEMETRY_REQUIRED(X)                                                                             \
  X(time) X(host) X(pid) X(rank) X(device) X(epoch) X(step) X(samples_per_s) X(bytes_per_s) X(batch_latency_p50_ms) \
  X(batch_latency_p99_ms) X(data_wait_ms) X(step_ms) X(prefetch_depth) X(ready) X(mode) X(mem_used) X(mem_reserved) \
  X(mem_allocated) X(mem_total)

TelemetryRecord telemetryFromJson(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throwBadInput("telemetry", "not a JSON object");
  std::string missing;
#define STOKER_NEED(name) \
  if (!j.contains(#name) || j[#name].is_null()) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  STOKER_TELEMETRY_REQUIRED(STOKER_NEED)
#undef STOKER_NEED
  if (!missing.empty()) throwBadInput("telemetry", "record lacks required fields: " + missing);
  TelemetryRecord r;
  try {
#define STOKER_GET(name) \
  if (j.contains(#name) && !j[#name].is_null()) readField(j[#name], r.name, #name);
    STOKER_TELEMETRY_FIELDS(STOKER_GET)
#undef STOKER_GET
  } catch (const nlohmann::json::exception& e) {
    throwBadInput("telemetry", std::string("a field has the wrong type: ") + e.what());
  }
  return r;
}

}  // namespace stoker
