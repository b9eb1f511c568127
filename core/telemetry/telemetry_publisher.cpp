#include "telemetry/telemetry_publisher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include "telemetry/metrics_http_server.h"
#include "telemetry/prometheus_exporter.h"
#include "telemetry/socket_address.h"
#include "util/error.h"

namespace stoker {

namespace {

constexpr std::size_t kPendingLimit = 256 * 1024;
constexpr std::size_t kMaxListenPeers = 16;  // monitors dialling in to a `listen:` publisher

void closeTarget(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// A connected peer: the socket and the bytes of a line it took only partly.
struct Peer {
  int fd = -1;
  std::string pending;
};

enum class Sent { Taken, Dropped, Closed };

// A partly sent line goes out first; a new line only if it fits whole. Never waits.
Sent sendLine(Peer& p, const std::string& data) {
  if (p.pending.size() + data.size() > kPendingLimit) {
    if (!p.pending.empty()) {
      const ssize_t n = send(p.fd, p.pending.data(), p.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) p.pending.erase(0, static_cast<std::size_t>(n));
    }
    return Sent::Dropped;
  }
  p.pending += data;
  const ssize_t n = send(p.fd, p.pending.data(), p.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    closeTarget(p.fd);  // the reader went away
    p.pending.clear();
    return Sent::Closed;
  }
  if (n > 0) p.pending.erase(0, static_cast<std::size_t>(n));
  return Sent::Taken;
}

}  // namespace

struct TelemetryPublisher::Target {
  enum Kind { File, Connect, Listen, Prometheus } kind = Connect;
  std::string path;
  SocketAddress address;
  int fd = -1;  // the file, or the listening socket
  bool connected = false;
  Peer peer;                // Connect
  std::vector<Peer> peers;  // Listen: monitors that dialled in
  std::chrono::steady_clock::time_point nextAttempt{};
  std::unique_ptr<PrometheusExporter> exporter;  // Prometheus: latest figures, served on scrape
  std::unique_ptr<MetricsHttpServer> server;

  Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  ~Target() {  // also when a later address of the constructor throws
    closeTarget(fd);
    closeTarget(peer.fd);
    for (auto& p : peers) closeTarget(p.fd);
  }
};

TelemetryPublisher::TelemetryPublisher(const std::vector<std::string>& addresses, std::size_t queueLimit)
    : queueLimit_(queueLimit) {
  for (const auto& a : addresses) {
    auto t = std::make_unique<Target>();
    if (a.rfind("file:", 0) == 0) {
      t->kind = Target::File;
      t->path = a.substr(5);
      if (t->path.empty()) throwBadInput("address " + a, "file: needs a path");
    } else if (a.rfind("listen:", 0) == 0) {
      // The Monitor dials in (a firewall that lets only the workstation connect out).
      t->kind = Target::Listen;
      const std::string rest = a.substr(7);
      t->address = parseSocketAddress(rest.find(':') == std::string::npos ? ":" + rest : rest);
      t->fd = listenOn(t->address);
      t->address.port = boundPort(t->fd);
    } else if (a.rfind("prometheus:", 0) == 0) {
      t->kind = Target::Prometheus;
      const std::string rest = a.substr(11);
      t->exporter = std::make_unique<PrometheusExporter>();
      PrometheusExporter* exporter = t->exporter.get();
      t->server = std::make_unique<MetricsHttpServer>(rest.find(':') == std::string::npos ? ":" + rest : rest,
                                                      [exporter] { return exporter->render(); });
      t->address.port = t->server->port();
    } else {
      t->address = parseSocketAddress(a);
      if (t->address.port == 0) throwBadInput("address " + a, "publishing needs a port other than 0");
    }
    if (t->kind != Target::Prometheus) ++lineTargets_;
    targets_.push_back(std::move(t));
  }
  thread_ = std::thread([this] { run(); });
}

TelemetryPublisher::~TelemetryPublisher() {
  flush(200);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int TelemetryPublisher::listeningPort(std::size_t i) const {
  const Target& t = *targets_.at(i);
  return t.kind == Target::Listen || t.kind == Target::Prometheus ? t.address.port : 0;
}

void TelemetryPublisher::onRecord(const TelemetryRecord& record) {
  // The endpoint keeps the latest figures itself (a map update); the line targets get a queued line.
  bool lines = false;
  for (auto& t : targets_) {
    if (t->kind == Target::Prometheus) {
      TelemetryRecord r = record;
      if (!isKnown(r.dropped)) r.dropped = dropped_.load();
      t->exporter->onRecord(r);
    } else {
      lines = true;
    }
  }
  if (lines) publishLine(telemetryToJson(record));
}

void TelemetryPublisher::publishLine(std::string line) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= queueLimit_) {
      dropped_.fetch_add(static_cast<std::int64_t>(lineTargets_));
      return;
    }
    queue_.push_back(std::move(line));
  }
  wake_.notify_one();
}

void TelemetryPublisher::flush(int ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return queue_.empty() && !busy_; });
}

bool TelemetryPublisher::deliver(Target& t, const std::string& line) {
  const auto now = std::chrono::steady_clock::now();
  const std::string data = line + "\n";
  switch (t.kind) {
    case Target::Prometheus:
      return true;  // fed by onRecord()
    case Target::File:
      if (t.fd < 0) t.fd = open(t.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (t.fd < 0) return false;
      return write(t.fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    case Target::Listen: {
      for (int fd; (fd = accept4(t.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        if (t.peers.size() >= kMaxListenPeers) {
          // Full: a peer that stopped reading (half its backlog or more waiting) makes room, so
          // 16 connections that never read cannot lock every monitor out for good.
          auto stalled = std::max_element(t.peers.begin(), t.peers.end(), [](const Peer& a, const Peer& b) {
            return a.pending.size() < b.pending.size();
          });
          if (stalled->pending.size() < kPendingLimit / 2) {
            close(fd);
            continue;
          }
          closeTarget(stalled->fd);
          t.peers.erase(stalled);
        }
        t.peers.push_back(Peer{fd, {}});
      }
      bool any = false;
      for (auto& p : t.peers)
        if (sendLine(p, data) == Sent::Taken) any = true;
      t.peers.erase(std::remove_if(t.peers.begin(), t.peers.end(), [](const Peer& p) { return p.fd < 0; }),
                    t.peers.end());
      return any;
    }
    case Target::Connect:
      break;
  }
  if (t.peer.fd < 0) {
    if (now < t.nextAttempt) return false;
    t.nextAttempt = now + std::chrono::seconds(1);
    t.peer.fd = connectNonBlocking(t.address);
    t.connected = false;
    t.peer.pending.clear();
    if (t.peer.fd < 0) return false;
  }
  if (!t.connected) {
    pollfd p{t.peer.fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return false;  // still connecting: drop, do not wait
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(t.peer.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      closeTarget(t.peer.fd);
      return false;
    }
    t.connected = true;
  }
  return sendLine(t.peer, data) == Sent::Taken;  // a closed reader is dialled again later
}

void TelemetryPublisher::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return quit_ || !queue_.empty(); });
    if (quit_) return;
    if (queue_.empty()) continue;
    std::deque<std::string> batch;
    batch.swap(queue_);
    busy_ = true;
    lock.unlock();
    for (const auto& line : batch) {
      bool any = false;
      for (auto& t : targets_) {
        if (t->kind == Target::Prometheus) continue;  // fed by onRecord(), not by lines
        if (deliver(*t, line)) any = true;
        else dropped_.fetch_add(1);
      }
      if (any) sent_.fetch_add(1);
    }
    batch.clear();  // free the lines before taking the lock that onRecord() waits for
    lock.lock();
    busy_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace stoker
