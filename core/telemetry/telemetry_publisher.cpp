#include "telemetry/telemetry_publisher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>

#include "telemetry/socket_address.h"
#include "util/error.h"

namespace stoker {

struct TelemetryPublisher::Target {
  bool isFile = false;
  std::string path;
  SocketAddress address;
  int fd = -1;
  bool connected = false;
  std::string pending;  // bytes of a line the socket took only partly
  std::chrono::steady_clock::time_point nextAttempt{};
};

namespace {

constexpr std::size_t kPendingLimit = 256 * 1024;

void closeTarget(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

TelemetryPublisher::TelemetryPublisher(const std::vector<std::string>& addresses, std::size_t queueLimit)
    : queueLimit_(queueLimit) {
  for (const auto& a : addresses) {
    auto t = std::make_unique<Target>();
    if (a.rfind("file:", 0) == 0) {
      t->isFile = true;
      t->path = a.substr(5);
      if (t->path.empty()) throwBadInput("address " + a, "file: needs a path");
    } else {
      t->address = parseSocketAddress(a);
      if (t->address.port == 0) throwBadInput("address " + a, "publishing needs a port other than 0");
    }
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
  for (auto& t : targets_) closeTarget(t->fd);
}

void TelemetryPublisher::onRecord(const TelemetryRecord& record) { publishLine(telemetryToJson(record)); }

void TelemetryPublisher::publishLine(std::string line) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= queueLimit_) {
      dropped_.fetch_add(static_cast<std::int64_t>(targets_.size()));
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
  if (t.isFile) {
    if (t.fd < 0) t.fd = open(t.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t.fd < 0) return false;
    const std::string data = line + "\n";
    return write(t.fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  }
  if (t.fd < 0) {
    if (now < t.nextAttempt) return false;
    t.nextAttempt = now + std::chrono::seconds(1);
    t.fd = connectNonBlocking(t.address);
    t.connected = false;
    t.pending.clear();
    if (t.fd < 0) return false;
  }
  if (!t.connected) {
    pollfd p{t.fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0) return false;  // still connecting: drop, do not wait
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(t.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      closeTarget(t.fd);
      return false;
    }
    t.connected = true;
  }
  // A partly sent line goes out first; a new line only if it fits whole.
  const std::string data = line + "\n";
  if (t.pending.size() + data.size() > kPendingLimit) {
    if (!t.pending.empty()) {
      const ssize_t n = send(t.fd, t.pending.data(), t.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) t.pending.erase(0, static_cast<std::size_t>(n));
    }
    return false;
  }
  t.pending += data;
  const ssize_t n = send(t.fd, t.pending.data(), t.pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    closeTarget(t.fd);  // the reader went away; reconnect later
    t.pending.clear();
    return false;
  }
  if (n > 0) t.pending.erase(0, static_cast<std::size_t>(n));
  return true;
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
