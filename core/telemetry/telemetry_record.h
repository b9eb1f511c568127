// telemetry/telemetry_record: one loader report, as observers receive it and
// as the publisher streams it (one JSON object per line). The field names of
// the JSON are the contract of DESIGN.md's Telemetry section.
#pragma once

#include <cstdint>
#include <string>

namespace stoker {

struct TelemetryRecord {
  double time = 0;  // seconds since the Unix epoch
  std::string host;
  std::int64_t pid = 0;
  int rank = 0;
  int worker = 0;  // LoaderOptions::worker_id
  std::string device;
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // batches handed out so far in this epoch
  std::int64_t steps_total = 0;
  double samples_per_s = 0;
  double bytes_per_s = 0;
  double batch_latency_p50_ms = 0;  // time a worker took to produce a batch
  double batch_latency_p99_ms = 0;
  double data_wait_ms = 0;  // mean time the consumer waited in next() per batch
  double step_ms = 0;       // mean time the consumer spent between batches (its training step)
  int prefetch_depth = 0;
  int ready = 0;            // batches ready when the consumer asked
  std::string mode;         // resident or streaming
  std::int64_t mem_used = 0;  // device memory in bytes
  std::int64_t mem_reserved = 0;
  std::int64_t mem_allocated = 0;
  std::int64_t mem_total = 0;
  bool epoch_end = false;   // the summary record of an epoch
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
