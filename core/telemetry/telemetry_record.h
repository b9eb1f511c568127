// telemetry/telemetry_record: one loader report, as observers receive it and
// as the publisher streams it (one JSON object per line). The field names of
// the JSON are the contract of DESIGN.md's Telemetry section.
//
// Not every publisher knows every figure: the Python probe sees no worker
// timings nor prefetch counts, a CPU run has no device memory. Such a field is
// absent from the JSON and *unknown* here -- NaN for a double, -1 for a count
// or a byte figure (kUnknown) -- so nothing ever shows it as a measured 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

namespace stoker {

inline constexpr int kUnknown = -1;
inline constexpr double kUnknownValue = NAN;
inline bool isKnown(double v) { return !std::isnan(v); }
inline bool isKnown(std::int64_t v) { return v >= 0; }
inline bool isKnown(int v) { return v >= 0; }

// The loader's stages, in pipeline order, as `stages_ms` keys.
inline constexpr const char* kTelemetryStages[] = {"read", "decode", "transform", "collate", "copy"};

struct TelemetryRecord {
  // Always present (a record without one of them is refused).
  double time = 0;  // seconds since the Unix epoch
  std::string host;
  std::int64_t pid = 0;
  int rank = 0;
  std::string device;
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // batches handed out so far in this epoch
  double samples_per_s = 0;
  double data_wait_ms = 0;  // mean time the consumer waited in next() per batch
  double step_ms = 0;       // mean time the consumer spent between batches (its training step)
  std::string mode;         // resident, streaming, or python (the probe)

  // Defaulted when absent.
  int worker = 0;  // LoaderOptions::worker_id
  std::int64_t steps_total = 0;
  bool epoch_end = false;   // the summary record of an epoch

  // Unknown when absent (NaN / kUnknown).
  double bytes_per_s = kUnknownValue;
  double batch_latency_p50_ms = kUnknownValue;  // time a worker took to produce a batch
  double batch_latency_p99_ms = kUnknownValue;
  int prefetch_depth = kUnknown;
  int ready = kUnknown;  // batches ready when the consumer asked
  std::int64_t mem_used = kUnknown;  // device memory in bytes
  std::int64_t mem_reserved = kUnknown;
  std::int64_t mem_allocated = kUnknown;
  std::int64_t mem_total = kUnknown;

  // DESIGN.md's optional fields ("Telemetry, continued").
  std::map<std::string, double> stages_ms;  // mean per-batch worker ms by stage; empty = unknown
  std::string source;                       // "stoker", "python", or "" (unknown)
  int local_rank = kUnknown;
  int world_size = kUnknown;
  std::int64_t pinned_bytes = kUnknown;
  std::int64_t dropped = kUnknown;  // records the publisher has dropped so far
  std::string loader;               // a name for the loader when a process has several
  // What the process has asked remote storage (s3://, http(s)://) for so far: requests sent (every
  // attempt), body bytes received, requests retried. Unknown in a process that has sent none.
  std::int64_t net_requests = kUnknown;
  std::int64_t net_bytes = kUnknown;
  std::int64_t net_retries = kUnknown;
  std::string collectives;          // the ranks' c10d backend: "nccl", "gloo", or "" (none, unknown)
  // What the loader reads and how (the Python package sends them): the dataset spec and its
  // LoaderOptions as one JSON object, so the Monitor can hand a running loader to the Loader
  // workspace to re-tune it. "" = not sent.
  std::string dataset;
  std::string options;
};

std::string telemetryToJson(const TelemetryRecord& r);  // one line, no newline
// Throws Error(BadInput) if `line` is not a telemetry record.
TelemetryRecord telemetryFromJson(const std::string& line);

// Receives records from a loader. Called on the loader's consumer thread:
// implementations must return quickly (queue, do not write to the network).
class TelemetryObserver {
 public:
  virtual ~TelemetryObserver() = default;
  virtual void onRecord(const TelemetryRecord& record) = 0;
};

}  // namespace stoker
