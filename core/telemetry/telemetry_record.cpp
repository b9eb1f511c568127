#include "telemetry/telemetry_record.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_number.h"
#include "util/redacted_url.h"

namespace stoker {

namespace {
// A name (host, device, loader...) longer than this is refused: a peer must not grow the
// Monitor's per-series maps by megabytes a record.
constexpr std::size_t kMaxText = 256;
// A dataset spec (a path, a URL with a brace range) and a loader's options are longer, still bounded.
constexpr std::size_t kMaxSpec = 4096;
constexpr std::size_t kMaxOptions = 16384;

// Integral fields must hold an integer that fits; a figure must be a finite number >= 0 (a
// rate of 1e300 cast to bytes is undefined behaviour); text must be short.
template <class T>
void readField(const nlohmann::json& v, T& out, const char* name) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const auto n = jsonInteger<T>(v);
    if (!n) throwBadInput("telemetry", std::string("field \"") + name + "\" is not an integer in range");
    out = *n;
  } else if constexpr (std::is_same_v<T, double>) {
    out = v.get<double>();
    if (!std::isfinite(out) || out < 0 || out > 1e18)
      throwBadInput("telemetry", std::string("field \"") + name + "\" is not a number in [0, 1e18]");
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = v.get<std::string>();
    if (out.size() > kMaxText)
      throwBadInput("telemetry", std::string("field \"") + name + "\" is longer than 256 bytes");
  } else {
    out = v.get<T>();
  }
}

// No integral field is negative: -1 is how this struct says "unknown", and a negative rank, pid,
// step or epoch from a peer would be a row, a series or a heat-map cell that no process is.
template <class T>
void readNonNegative(const nlohmann::json& v, T& out, const char* name) {
  readField(v, out, name);
  if constexpr (std::is_integral_v<T>)
    if (out < 0) throwBadInput("telemetry", std::string("field \"") + name + "\" is negative");
}

bool present(const nlohmann::json& j, const char* name) { return j.contains(name) && !j[name].is_null(); }
}  // namespace

// DESIGN.md's Telemetry section: what every record carries. A record without one of them
// is not telemetry.
#define STOKER_TELEMETRY_REQUIRED(X) \
  X(time) X(host) X(pid) X(rank) X(device) X(epoch) X(step) X(samples_per_s) X(data_wait_ms) X(step_ms) X(mode)
// Defaulted when absent.
#define STOKER_TELEMETRY_DEFAULTED(X) X(worker) X(steps_total) X(epoch_end)
// Unknown when absent, and left out of the JSON while unknown.
#define STOKER_TELEMETRY_KNOWABLE(X)                                                                           \
  X(bytes_per_s) X(batch_latency_p50_ms) X(batch_latency_p99_ms) X(prefetch_depth) X(ready) X(mem_used)        \
  X(mem_reserved) X(mem_allocated) X(mem_total) X(local_rank) X(world_size) X(pinned_bytes) X(dropped)        \
  X(net_requests) X(net_bytes) X(net_retries)

std::string telemetryToJson(const TelemetryRecord& r) {
  nlohmann::json j;
#define STOKER_PUT(name) j[#name] = r.name;
  STOKER_TELEMETRY_REQUIRED(STOKER_PUT)
  STOKER_TELEMETRY_DEFAULTED(STOKER_PUT)
#undef STOKER_PUT
#define STOKER_PUT_KNOWN(name) \
  if (isKnown(r.name)) j[#name] = r.name;
  STOKER_TELEMETRY_KNOWABLE(STOKER_PUT_KNOWN)
#undef STOKER_PUT_KNOWN
  if (!r.stages_ms.empty()) j["stages_ms"] = r.stages_ms;
  if (!r.source.empty()) j["source"] = r.source;
  if (!r.loader.empty()) j["loader"] = r.loader;
  if (!r.collectives.empty()) j["collectives"] = r.collectives;
  if (!r.dataset.empty()) j["dataset"] = r.dataset;
  if (!r.options.empty()) {
    nlohmann::json options = nlohmann::json::parse(r.options, nullptr, false);
    if (options.is_object()) j["options"] = std::move(options);
  }
  return j.dump();
}

namespace {

// How deep a JSON text nests its arrays and objects (strings skipped). nlohmann parses any depth,
// but dump() recurses once a level: an "options" 500,000 levels deep (a 1 MiB line) overflowed the
// stack of the Monitor's listener thread.
int jsonNesting(const std::string& text) {
  int depth = 0, deepest = 0;
  bool inString = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') ++i;
      else if (c == '"') inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

constexpr int kMaxNesting = 16;  // a record is an object of scalars, "stages_ms" and "options"

}  // namespace

TelemetryRecord telemetryFromJson(const std::string& line) {
  if (jsonNesting(line) > kMaxNesting)
    throwBadInput("telemetry", "nests deeper than " + std::to_string(kMaxNesting) + " levels");
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throwBadInput("telemetry", "not a JSON object");
  std::string missing;
#define STOKER_NEED(name) \
  if (!present(j, #name)) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  STOKER_TELEMETRY_REQUIRED(STOKER_NEED)
#undef STOKER_NEED
  if (!missing.empty()) throwBadInput("telemetry", "record lacks required fields: " + missing);
  TelemetryRecord r;
  try {
#define STOKER_GET(name) \
  if (present(j, #name)) readNonNegative(j[#name], r.name, #name);
    STOKER_TELEMETRY_REQUIRED(STOKER_GET)
    STOKER_TELEMETRY_DEFAULTED(STOKER_GET)
#undef STOKER_GET
#define STOKER_GET_KNOWABLE(name) \
  if (present(j, #name)) readNonNegative(j[#name], r.name, #name);
    STOKER_TELEMETRY_KNOWABLE(STOKER_GET_KNOWABLE)
#undef STOKER_GET_KNOWABLE
    if (present(j, "stages_ms")) {
      const auto& stages = j["stages_ms"];
      if (!stages.is_object()) throwBadInput("telemetry", "field \"stages_ms\" is not an object");
      // Only the stages DESIGN.md names: a hostile peer cannot grow the map without bound.
      for (const char* stage : kTelemetryStages)
        if (present(stages, stage)) {
          readField(stages[stage], r.stages_ms[stage], stage);
        }
    }
    if (present(j, "source")) readField(j["source"], r.source, "source");
    if (present(j, "loader")) readField(j["loader"], r.loader, "loader");
    if (present(j, "collectives")) readField(j["collectives"], r.collectives, "collectives");
    if (present(j, "dataset")) {
      r.dataset = j["dataset"].get<std::string>();
      if (r.dataset.size() > kMaxSpec) throwBadInput("telemetry", "field \"dataset\" is longer than 4096 bytes");
      // Stoker's own senders hide a URL's secrets; another sender's are hidden as they arrive, so
      // no Monitor table, saved session or export holds them.
      r.dataset = redactedUrl(r.dataset);
    }
    if (present(j, "options")) {
      if (!j["options"].is_object()) throwBadInput("telemetry", "field \"options\" is not an object");
      r.options = j["options"].dump();
      if (r.options.size() > kMaxOptions) throwBadInput("telemetry", "field \"options\" is longer than 16384 bytes");
    }
  } catch (const nlohmann::json::exception& e) {
    throwBadInput("telemetry", std::string("a field has the wrong type: ") + e.what());
  }
  return r;
}

}  // namespace stoker
