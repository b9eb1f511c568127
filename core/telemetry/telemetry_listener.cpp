#include "telemetry/telemetry_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "telemetry/socket_address.h"
#include "util/error.h"

namespace stoker {

namespace {
// A peer sending no newline is cut off. An honest record is under 48 KiB: options are refused past
// 16 KiB, a dataset spec past 4 KiB (escaped, 24 KiB), names past 256 bytes.
constexpr std::size_t kMaxLine = 256 << 10;
// What all peers' unfinished lines may hold together: past it, a peer holding more than an honest
// record's worth unfinished is cut off (4096 peers x 1 MiB held 4 GiB before).
constexpr std::size_t kMaxPendingBytes = 64 << 20;
constexpr std::size_t kHonestLine = 64 << 10;
// One fast peer must not keep the others waiting: it gets at most this many reads per poll.
constexpr int kMaxReadsPerPoll = 16;
// What one poll reads from all peers together (4096 peers x 16 reads x 64 KiB was 4 GiB of records
// handed over at once); the peers it did not reach are read first next time.
constexpr std::size_t kMaxBytesPerPoll = 32 << 20;
// Connections beyond this are closed at once.
constexpr std::size_t kMaxPeers = 4096;
constexpr double kMaxAheadSeconds = 3600;  // a record's time ahead of the listener's clock
}

TelemetryListener::TelemetryListener(const std::string& address) {
  if (address.empty()) return;
  listenFd_ = listenOn(parseSocketAddress(address));
  port_ = boundPort(listenFd_);
}

void TelemetryListener::dial(const std::string& address) {
  Dialled d;
  d.address = parseSocketAddress(address);
  if (d.address.port == 0) throwBadInput("address " + address, "dialling needs a port other than 0");
  dialled_.push_back(d);
  redial();
}

// A dialled publisher whose connection is gone (refused, closed) is tried again once a second;
// its socket reads like any accepted peer's.
void TelemetryListener::redial() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& d : dialled_) {
    if (d.fd >= 0 && peers_.count(d.fd)) continue;
    d.fd = -1;
    if (now < d.nextAttempt) continue;
    d.nextAttempt = now + std::chrono::seconds(1);
    d.fd = connectNonBlocking(d.address);
    if (d.fd >= 0) {
      keepAlive(d.fd);
      peers_[d.fd];
    }
  }
}

TelemetryListener::~TelemetryListener() {
  for (auto& [fd, rest] : peers_) close(fd);
  if (listenFd_ >= 0) close(listenFd_);
}

std::vector<TelemetryRecord> TelemetryListener::poll(int timeoutMs) {
  redial();
  // Without a listening socket (or while accepting waits: acceptAgainAt_), slot 0 is a negative
  // fd, which poll() ignores.
  const auto now = std::chrono::steady_clock::now();
  const bool accepting = listenFd_ >= 0 && now >= acceptAgainAt_;
  std::vector<pollfd> fds{{accepting ? listenFd_ : -1, POLLIN, 0}};
  for (auto& [fd, rest] : peers_) fds.push_back({fd, POLLIN, 0});
  std::vector<TelemetryRecord> out;
  if (!accepting && listenFd_ >= 0)
    timeoutMs = std::min<int>(timeoutMs < 0 ? 100 : timeoutMs,
                              static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(acceptAgainAt_ - now).count()) + 1);
  if (::poll(fds.data(), fds.size(), timeoutMs) <= 0) return out;
  if (accepting && (fds[0].revents & POLLIN)) {
    int fd;
    while ((fd = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
      if (peers_.size() >= kMaxPeers) {
        close(fd);
        ++refusedConnections_;
        continue;
      }
      keepAlive(fd);  // a publisher's host that died sends no FIN: found in about two minutes
      peers_[fd];
    }
    if (errno == EMFILE || errno == ENFILE) {
      acceptAgainAt_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      ++refusedConnections_;
    }
  }
  const double wallNow = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::size_t pending = pendingBytes(), readThisPoll = 0;
  const std::size_t count = fds.size() - 1;
  std::size_t served = 0;
  for (std::size_t k = 0; k < count && readThisPoll < kMaxBytesPerPoll; ++k, ++served) {
    const std::size_t i = 1 + (firstPeer_ + k) % count;  // round robin: who was cut short goes first
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const int fd = fds[i].fd;
    std::string& buffer = peers_[fd];
    pending -= buffer.size();
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
      readThisPoll += static_cast<std::size_t>(n);
      std::size_t start = 0;
      for (std::size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (nl == start) continue;
        try {
          TelemetryRecord r = telemetryFromJson(buffer.substr(start, nl - start));
          // A record from more than an hour ahead of this clock (beyond any skew between hosts)
          // would make every honest rank look stale and push the plots' window past their points.
          if (r.time > wallNow + kMaxAheadSeconds) throwBadInput("telemetry", "\"time\" is in the future");
          out.push_back(std::move(r));
        } catch (const Error&) {
          ++badLines_;
        }
      }
      buffer.erase(0, start);
      if (buffer.size() > kMaxLine || (pending + buffer.size() > kMaxPendingBytes && buffer.size() > kHonestLine)) {
        ++badLines_;  // a peer sending no newline is cut off
        closed = true;
      }
    }
    if (!closed) pending += buffer.size();
    if (closed) {
      close(fd);
      peers_.erase(fd);
      for (auto& d : dialled_)
        if (d.fd == fd) d.fd = -1;  // its number may be reused by the next accept
    }
  }
  firstPeer_ = count ? (firstPeer_ + served) % count : 0;
  return out;
}

}  // namespace stoker
