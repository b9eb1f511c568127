#include "telemetry/metrics_http_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "telemetry/prometheus_exporter.h"
#include "telemetry/socket_address.h"
#include "util/error.h"

// Why not cpp-httplib's server (used here before): Debian's 0.11.4 reads a chunked or
// length-less request body, and a request line or header without its newline, into memory without
// bound (set_payload_max_length is not checked there), and two clients trickling a byte every
// 4 s held both of its threads, so no scrape was served and stop() waited for them. A scrape is
// one small GET: a poll() loop with a byte limit and a deadline per connection serves it, and
// nothing a client sends can hold more than those.

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxRequestBytes = 8 * 1024;           // request line and headers
constexpr std::size_t kMaxConnections = 64;                  // the oldest goes when another comes
constexpr auto kConnectionDeadline = std::chrono::seconds(5);  // to send the request and take the reply

struct Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;   // the request so far
  std::string out;  // the reply, once the request is whole
  std::size_t sent = 0;
};

std::string reply(int status, const char* reason, const std::string& contentType, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + contentType +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

struct MetricsHttpServer::Impl {
  int listenFd = -1;
  int wake[2] = {-1, -1};  // the destructor writes a byte: the loop ends
  std::function<std::string()> body;
  std::vector<Connection> connections;

  ~Impl() {
    for (const Connection& c : connections) ::close(c.fd);
    for (int fd : {listenFd, wake[0], wake[1]})
      if (fd >= 0) ::close(fd);
  }

  // The reply to a whole request: GET /metrics, GET / (what this is), else an error status.
  std::string answer(const std::string& request) const {
    std::string line = request.substr(0, request.find('\n'));
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF, or a bare LF (RFC 9112 2.2)
    const std::size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0)
      return reply(400, "Bad Request", "text/plain; charset=utf-8", "bad request\n");
    const std::string method = line.substr(0, sp1);
    std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    if (method != "GET" && method != "HEAD")
      return reply(405, "Method Not Allowed", "text/plain; charset=utf-8", "only GET\n");
    std::string out;
    if (path == "/metrics") out = reply(200, "OK", kPrometheusContentType, body());
    else if (path == "/") out = reply(200, "OK", "text/plain; charset=utf-8", "Stoker telemetry: Prometheus metrics at /metrics\n");
    else out = reply(404, "Not Found", "text/plain; charset=utf-8", "not found\n");
    if (method == "HEAD") out.resize(out.find("\r\n\r\n") + 4);
    return out;
  }

  void accept() {
    for (;;) {
      const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or out of descriptors (the loop waits a tick before trying again)
      if (connections.size() >= kMaxConnections) {  // room for the newest: a stalled client cannot hold them all
        auto oldest = std::min_element(connections.begin(), connections.end(),
                                       [](const Connection& a, const Connection& b) { return a.deadline < b.deadline; });
        ::close(oldest->fd);
        connections.erase(oldest);
      }
      connections.push_back({fd, Clock::now() + kConnectionDeadline, {}, {}, 0});
    }
  }

  // Reads or writes what the connection has ready; false when it is done (closed by the caller).
  bool serve(Connection& c, short events) {
    if (c.out.empty()) {
      if (!(events & (POLLIN | POLLHUP | POLLERR))) return true;
      char buffer[4096];
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
      if (n < 0) return true;
      c.in.append(buffer, static_cast<std::size_t>(n));
      if (c.in.find("\r\n\r\n") == std::string::npos && c.in.find("\n\n") == std::string::npos) {
        if (c.in.size() <= kMaxRequestBytes) return true;
        c.out = reply(431, "Request Header Fields Too Large", "text/plain; charset=utf-8", "request too large\n");
      } else {
        c.out = answer(c.in);
      }
      c.in.clear();
      c.in.shrink_to_fit();
    }
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.sent += static_cast<std::size_t>(n);
    }
    // All sent: Connection: close. Bytes of the client's not read (a pipelined request, a body)
    // would make close() send a reset, which can destroy the reply before the client reads it:
    // so the reply ends with a FIN and what came after the request is read and dropped first.
    ::shutdown(c.fd, SHUT_WR);
    char drop[4096];
    for (int k = 0; k < 16 && ::recv(c.fd, drop, sizeof drop, MSG_DONTWAIT) > 0; ++k) {
    }
    return false;
  }

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      const auto now = Clock::now();
      // A connection past its deadline (a request never finished, a reply never taken) is closed.
      connections.erase(std::remove_if(connections.begin(), connections.end(),
                                       [&](const Connection& c) {
                                         if (c.deadline > now) return false;
                                         ::close(c.fd);
                                         return true;
                                       }),
                        connections.end());
      fds.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listenFd, POLLIN, 0});
      for (const Connection& c : connections) fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      int timeoutMs = 1000;
      for (const Connection& c : connections)
        timeoutMs = std::min<int>(timeoutMs, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  c.deadline - now).count()) + 1);
      if (::poll(fds.data(), fds.size(), std::max(timeoutMs, 0)) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;  // the destructor
      std::vector<Connection> kept;
      for (std::size_t i = 0; i < connections.size(); ++i) {
        Connection& c = connections[i];
        if (!fds[i + 2].revents || serve(c, fds[i + 2].revents)) kept.push_back(std::move(c));
        else ::close(c.fd);
      }
      connections.swap(kept);
      if (fds[1].revents & POLLIN) {
        const std::size_t before = connections.size();
        accept();
        // Out of descriptors: the pending connection stays queued and the socket readable; wait a
        // little rather than spin on it.
        if (connections.size() == before && (errno == EMFILE || errno == ENFILE))
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
};

MetricsHttpServer::MetricsHttpServer(const std::string& address, std::function<std::string()> body)
    : impl_(std::make_unique<Impl>()) {
  const SocketAddress a = parseSocketAddress(address);
  impl_->body = std::move(body);
  try {
    impl_->listenFd = listenOn(a);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Io) throw;
    throw Error(ErrorKind::Io, "metrics endpoint " + address, e.reason());
  }
  port_ = boundPort(impl_->listenFd);
  if (::pipe2(impl_->wake, O_CLOEXEC) != 0) throwIo("metrics endpoint " + address, "cannot make its wake-up pipe", errno);
  thread_ = std::thread([this] { impl_->run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 1;
  if (::write(impl_->wake[1], &byte, 1) < 0) {
    // The pipe is ours and empty: a write cannot fail; the join below would then wait.
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace stoker
