#include "telemetry/metrics_http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "telemetry/prometheus_exporter.h"
#include "telemetry/socket_address.h"
#include "util/error.h"

namespace stoker {

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::atomic<bool> ended{false};
};

MetricsHttpServer::MetricsHttpServer(const std::string& address, std::function<std::string()> body)
    : impl_(std::make_unique<Impl>()) {
  const SocketAddress a = parseSocketAddress(address);
  auto& s = impl_->server;
  // A scrape is one small GET: two threads are plenty, and a client that sends nothing is cut off.
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  // One request per connection: an idle kept-alive client would hold one of the two threads.
  s.set_keep_alive_max_count(1);
  s.set_payload_max_length(64 * 1024);
  // httplib's default also sets SO_REUSEPORT, which lets a second process bind the same port and
  // take half the scrapes: a port in use must be an error instead.
  s.set_socket_options([](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  s.Get("/metrics", [body = std::move(body)](const httplib::Request&, httplib::Response& res) {
    res.set_content(body(), kPrometheusContentType);
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("Stoker telemetry: Prometheus metrics at /metrics\n", "text/plain; charset=utf-8");
  });
  const std::string host = a.host.empty() ? "0.0.0.0" : a.host;
  port_ = a.port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, a.port) ? a.port : -1);
  if (port_ <= 0) throwIo("metrics endpoint " + address, "cannot listen there", errno);
  thread_ = std::thread([this] {
    impl_->server.listen_after_bind();
    impl_->ended = true;
  });
  // httplib's stop() does nothing until the server runs: wait for it, so that destroying the
  // server at once still ends its thread.
  while (!impl_->server.is_running() && !impl_->ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MetricsHttpServer::~MetricsHttpServer() {
  impl_->server.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace stoker
