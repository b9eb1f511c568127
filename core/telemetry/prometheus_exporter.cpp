#include "telemetry/prometheus_exporter.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "telemetry/input_bound.h"

namespace stoker {

namespace {

double steadyNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Label values escape backslash, double quote and newline (the exposition format's rules).
std::string escapeLabel(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The shortest text that reads back as the same double (Prometheus parses Go's float syntax).
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

struct Metric {
  const char* name;
  const char* type;  // gauge or counter
  const char* help;
  bool perProcess;   // the process's own count: one series a process, not one a device or loader
  // Appends zero or more samples for one series: (extra labels, value); unknown figures add none.
  std::function<void(const TelemetryRecord&, std::int64_t records,
                     std::vector<std::pair<std::string, double>>&)>
      samples;
};

void ifKnown(std::vector<std::pair<std::string, double>>& out, double v, std::string labels = {}) {
  if (isKnown(v)) out.emplace_back(std::move(labels), v);
}
template <class Int>
void ifKnownCount(std::vector<std::pair<std::string, double>>& out, Int v, std::string labels = {}) {
  if (isKnown(v)) out.emplace_back(std::move(labels), static_cast<double>(v));
}

const std::vector<Metric>& metrics() {
  using Out = std::vector<std::pair<std::string, double>>;
  static const std::vector<Metric> all = {
      {"stoker_samples_per_second", "gauge", "Samples per second the loader handed to the consumer.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnown(o, r.samples_per_s); }},
      {"stoker_bytes_per_second", "gauge", "Bytes per second the loader handed to the consumer.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnown(o, r.bytes_per_s); }},
      {"stoker_data_wait_ratio", "gauge", "Share of each iteration spent waiting for data: wait / (wait + step).",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) {
         const double share = dataWaitShare(r.data_wait_ms, r.step_ms);
         if (share >= 0) o.emplace_back("", share);
       }},
      {"stoker_step_seconds", "gauge", "Mean time the consumer spent between batches (its training step).",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnown(o, r.step_ms / 1e3); }},
      {"stoker_data_wait_seconds", "gauge", "Mean time the consumer waited for each batch.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnown(o, r.data_wait_ms / 1e3); }},
      {"stoker_stage_seconds", "gauge", "Mean worker time per batch in each pipeline stage.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) {
         for (const char* stage : kTelemetryStages) {
           const auto it = r.stages_ms.find(stage);
           if (it != r.stages_ms.end()) o.emplace_back(std::string("stage=\"") + stage + "\"", it->second / 1e3);
         }
       }},
      {"stoker_batch_latency_seconds", "gauge", "Time a worker took to produce a batch, by percentile (50, 99).",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) {
         ifKnown(o, r.batch_latency_p50_ms / 1e3, "percentile=\"50\"");
         ifKnown(o, r.batch_latency_p99_ms / 1e3, "percentile=\"99\"");
       }},
      {"stoker_prefetch_depth", "gauge", "Most batches the loader prepares ahead of the consumer.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.prefetch_depth); }},
      {"stoker_ready_batches", "gauge", "Batches ready when the consumer asked for the next one.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.ready); }},
      {"stoker_device_memory_bytes", "gauge", "Device memory by kind.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) {
         ifKnownCount(o, r.mem_used, "kind=\"used\"");
         ifKnownCount(o, r.mem_reserved, "kind=\"reserved\"");
         ifKnownCount(o, r.mem_allocated, "kind=\"allocated\"");
         ifKnownCount(o, r.mem_total, "kind=\"total\"");
       }},
      {"stoker_pinned_bytes", "gauge", "Pinned host memory held for staging.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.pinned_bytes); }},
      {"stoker_net_requests_total", "counter", "Requests the process has sent to remote storage (every attempt).",
       true,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.net_requests); }},
      {"stoker_net_received_bytes_total", "counter", "Body bytes the process has received from remote storage.",
       true,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.net_bytes); }},
      {"stoker_net_retries_total", "counter", "Requests to remote storage the process has retried (5xx, 429, dropped or stalled).",
       true,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.net_retries); }},
      {"stoker_epoch", "gauge", "Epoch the loader is in.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { o.emplace_back("", static_cast<double>(r.epoch)); }},
      {"stoker_step", "gauge", "Batches handed out so far in this epoch.",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { o.emplace_back("", static_cast<double>(r.step)); }},
      {"stoker_records_dropped_total", "counter", "Telemetry records the publisher dropped rather than block.",
       true,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { ifKnownCount(o, r.dropped); }},
      {"stoker_records_received_total", "counter", "Telemetry records received from this series.",
       false,
       [](const TelemetryRecord&, std::int64_t records, Out& o) { o.emplace_back("", static_cast<double>(records)); }},
      {"stoker_last_record_timestamp_seconds", "gauge", "When the publisher sent its latest record (Unix time).",
       false,
       [](const TelemetryRecord& r, std::int64_t, Out& o) { o.emplace_back("", r.time); }},
  };
  return all;
}

}  // namespace

void PrometheusExporter::onRecord(const TelemetryRecord& record) {
  const double now = steadyNow();
  std::lock_guard<std::mutex> lock(mutex_);
  Key key{record.host, record.pid, record.rank, record.device, record.loader};
  if (series_.size() >= kMaxSeries && !series_.count(key)) {
    // Full: stale series go first; a peer inventing names cannot grow the map past the cap.
    for (auto it = series_.begin(); it != series_.end();)
      it = now - it->second.receivedAt > staleAfterS_ ? series_.erase(it) : std::next(it);
    if (series_.size() >= kMaxSeries) {
      ++refused_;
      return;
    }
  }
  Series& s = series_[key];
  s.last = record;
  s.receivedAt = now;
  ++s.records;
}

std::int64_t PrometheusExporter::refusedSeries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refused_;
}

std::size_t PrometheusExporter::seriesCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return series_.size();
}

std::string PrometheusExporter::render(double laterByS) const {
  const double now = steadyNow() + laterByS;
  // The live series copied under the lock, formatted without it: a scrape at the cap (10,000
  // series, ~20 MB) held the lock while it formatted, and records arriving meanwhile waited (the
  // Monitor's GUI thread hands them over).
  std::vector<std::pair<Key, Series>> series;
  std::int64_t refused = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    series.reserve(series_.size());
    for (const auto& [key, s] : series_)
      if (now - s.receivedAt <= staleAfterS_) series.emplace_back(key, s);
    refused = refused_;
  }
  std::string out;
  std::vector<std::pair<std::string, double>> samples;
  const auto labelsOf = [](int rank, const std::string* device, const std::string& host, std::int64_t pid) {
    return "rank=\"" + std::to_string(rank) + (device ? "\",device=\"" + escapeLabel(*device) : std::string()) + "\",host=\"" +
           escapeLabel(host) + "\",pid=\"" + std::to_string(pid) + "\"";
  };
  for (const Metric& m : metrics()) {
    std::string body;
    // A process's own counters: the largest of its series' values (they only grow; its latest record).
    std::map<std::tuple<std::string, std::int64_t, int, std::string>, double> perProcess;  // host, pid, rank, extra labels
    for (const auto& [key, s] : series) {
      samples.clear();
      m.samples(s.last, s.records, samples);
      const auto& [host, pid, rank, device, loader] = key;
      if (m.perProcess) {
        for (const auto& [extra, value] : samples) {
          auto [it, added] = perProcess.try_emplace({host, pid, rank, extra}, value);
          if (!added) it->second = std::max(it->second, value);
        }
        continue;
      }
      std::string labels = labelsOf(rank, &device, host, pid);
      if (!loader.empty()) labels += ",loader=\"" + escapeLabel(loader) + "\"";
      for (const auto& [extra, value] : samples)
        body += std::string(m.name) + "{" + labels + (extra.empty() ? "" : "," + extra) + "} " + number(value) + "\n";
    }
    for (const auto& [process, value] : perProcess) {
      const auto& [host, pid, rank, extra] = process;
      body += std::string(m.name) + "{" + labelsOf(rank, nullptr, host, pid) + (extra.empty() ? "" : "," + extra) + "} " + number(value) + "\n";
    }
    // A family with no samples still says what it is: scrapers see the schema before the first record.
    out += std::string("# HELP ") + m.name + " " + m.help + "\n# TYPE " + m.name + " " + m.type + "\n" + body;
  }
  // Series refused at the cap would vanish without a sign.
  out += "# HELP stoker_series_refused_total Records of new series refused because the exporter holds its most series.\n"
         "# TYPE stoker_series_refused_total counter\nstoker_series_refused_total " + std::to_string(refused) + "\n";
  return out;
}

}  // namespace stoker
