// telemetry/prometheus_exporter: the figures of every rank that reports, as
// Prometheus' text exposition format (DESIGN.md "Prometheus"). Keeps the
// latest record of each series (host, pid, rank, device, loader: two jobs on
// one host are two series, or a counter would jump between them) and renders
// them on demand; series silent for longer than `staleAfterS` are left out, so a
// finished job's ranks do not linger as if they were still running. The
// process's own counters (remote requests, bytes, retries, dropped records)
// are one series a process (host, pid, rank), so that sum() over series counts
// each process once however many devices or loaders it reports.
// Thread-safe: records arrive on one thread, scrapes on another.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "telemetry/telemetry_record.h"

namespace stoker {

class PrometheusExporter : public TelemetryObserver {
 public:
  explicit PrometheusExporter(double staleAfterS = 300) : staleAfterS_(staleAfterS) {}

  void onRecord(const TelemetryRecord& record) override;
  // The exposition text as of now, or `laterByS` seconds later (a test's clock).
  std::string render(double laterByS = 0) const;
  std::size_t seriesCount() const;
  // Series kept at most (a scrape of 10,000 ranks x 20 metrics is ~20 MB); records of new series
  // beyond it are counted here and dropped while no series is stale.
  static constexpr std::size_t kMaxSeries = 10000;
  std::int64_t refusedSeries() const;

 private:
  using Key = std::tuple<std::string, std::int64_t, int, std::string, std::string>;  // host, pid, rank, device, loader
  struct Series {
    TelemetryRecord last;
    double receivedAt = 0;  // steady clock's seconds: a wall clock stepped back kept ended jobs for its step
    std::int64_t records = 0;
  };
  double staleAfterS_;
  mutable std::mutex mutex_;
  std::map<Key, Series> series_;
  std::int64_t refused_ = 0;
};

// The media type Prometheus expects for text exposition 0.0.4.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace stoker
