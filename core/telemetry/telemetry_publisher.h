// telemetry/telemetry_publisher: streams telemetry records as JSON lines to
// the addresses it is given, from a thread of its own. onRecord() only
// queues: when the queue, a socket's buffer or the peer is full or absent,
// the record is dropped and counted, so the training loop never waits.
// Lost connections are retried at most once a second.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/telemetry_record.h"

namespace stoker {

class TelemetryPublisher : public TelemetryObserver {
 public:
  // Addresses: "HOST:PORT" or "tcp://HOST:PORT" (a listener such as
  // `stoker monitor`), "file:PATH" (appended), "listen:[HOST:]PORT" (monitors
  // dial in: a firewall that lets only the workstation connect out),
  // "prometheus:[HOST:]PORT" (this process's figures on a Prometheus
  // /metrics endpoint). Throws Error(BadInput) for a malformed address,
  // Error(Io) when a listening one cannot bind; an unreachable one only
  // drops records.
  explicit TelemetryPublisher(const std::vector<std::string>& addresses, std::size_t queueLimit = 4096);
  ~TelemetryPublisher() override;  // sends what it can within `flushMs`
  TelemetryPublisher(const TelemetryPublisher&) = delete;
  TelemetryPublisher& operator=(const TelemetryPublisher&) = delete;

  void onRecord(const TelemetryRecord& record) override;
  void publishLine(std::string line);  // one JSON object, no newline
  // Waits up to `ms` for the queue to drain (tests, orderly exits).
  void flush(int ms);

  // The port the i-th address listens on (listen:, prometheus:; port 0 picks one), else 0.
  int listeningPort(std::size_t i) const;
  std::int64_t sent() const { return sent_.load(); }        // lines written to some target
  std::int64_t dropped() const { return dropped_.load(); }  // line-target pairs dropped

 private:
  struct Target;
  void run();
  bool deliver(Target& t, const std::string& line);

  std::vector<std::unique_ptr<Target>> targets_;
  std::size_t lineTargets_ = 0;  // targets fed through the queue (all but prometheus:)
  std::size_t queueLimit_;
  std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<std::string> queue_;
  bool quit_ = false;
  bool busy_ = false;
  std::atomic<std::int64_t> sent_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace stoker
