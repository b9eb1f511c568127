#include "telemetry/telemetry_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "telemetry/socket_address.h"
#include "util/error.h"

namespace stoker {

namespace {
constexpr std::size_t kMaxLine = 1 << 20;  // a peer sending no newline is cut off
// One fast peer must not keep the others waiting: it gets at most this many reads per poll.
constexpr int kMaxReadsPerPoll = 16;
// Connections beyond this are closed at once (each may hold kMaxLine of an unfinished line).
constexpr std::size_t kMaxPeers = 4096;
}

TelemetryListener::TelemetryListener(const std::string& address) {
  listenFd_ = listenOn(parseSocketAddress(address));
  port_ = boundPort(listenFd_);
}

TelemetryListener::~TelemetryListener() {
  for (auto& [fd, rest] : peers_) close(fd);
  if (listenFd_ >= 0) close(listenFd_);
}

std::vector<TelemetryRecord> TelemetryListener::poll(int timeoutMs) {
  std::vector<pollfd> fds{{listenFd_, POLLIN, 0}};
  for (auto& [fd, rest] : peers_) fds.push_back({fd, POLLIN, 0});
  std::vector<TelemetryRecord> out;
  if (::poll(fds.data(), fds.size(), timeoutMs) <= 0) return out;
  if (fds[0].revents & POLLIN)
    for (int fd; (fd = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
      if (peers_.size() >= kMaxPeers) {
        close(fd);
        ++refusedConnections_;
        continue;
      }
      peers_[fd];
    }
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const int fd = fds[i].fd;
    std::string& buffer = peers_[fd];
    char chunk[65536];
    bool closed = false;
    // Lines are split after every read, so a peer's unfinished line -- and the memory it holds --
    // never exceeds kMaxLine plus one read, however fast it sends.
    for (int reads = 0; !closed && reads < kMaxReadsPerPoll; ++reads) {
      const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
        break;
      }
      buffer.append(chunk, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (nl == start) continue;
        try {
          out.push_back(telemetryFromJson(buffer.substr(start, nl - start)));
        } catch (const Error&) {
          ++badLines_;
        }
      }
      buffer.erase(0, start);
      if (buffer.size() > kMaxLine) {  // a peer sending no newline is cut off
        ++badLines_;
        closed = true;
      }
    }
    if (closed) {
      close(fd);
      peers_.erase(fd);
    }
  }
  return out;
}

}  // namespace stoker
