// telemetry/metrics_http_server: serves a Prometheus text endpoint (`GET
// /metrics`) from a thread of its own: one poll() loop, a reply per
// connection, at most 8 KiB of request and 5 s per connection, at most 64
// connections (the oldest goes). The body comes from a callback (a
// PrometheusExporter's render()), called per scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace stoker {

class MetricsHttpServer {
 public:
  // "HOST:PORT" or ":PORT" (all interfaces; port 0 picks a free one, see port()).
  // Throws Error(BadInput) for a malformed address, Error(Io) if it cannot bind.
  MetricsHttpServer(const std::string& address, std::function<std::string()> body);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace stoker
