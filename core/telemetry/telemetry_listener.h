// telemetry/telemetry_listener: the receiving end, for `stoker monitor` and
// the workbench's Monitor. Listens on one address, accepts any number of
// publishers (one per rank) and splits what they send into records; it can
// also dial publishers that listen themselves (`listen:PORT`), redialling
// once a second while they are away. Runs on the caller's thread: poll()
// waits at most the given time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "telemetry/socket_address.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class TelemetryListener {
 public:
  // "HOST:PORT" or ":PORT" (port 0 picks a free one, see port()). Throws
  // Error(BadInput) for a malformed address, Error(Io) if it cannot bind.
  // An empty address listens nowhere (only dialled publishers, see dial()).
  explicit TelemetryListener(const std::string& address);
  ~TelemetryListener();
  TelemetryListener(const TelemetryListener&) = delete;
  TelemetryListener& operator=(const TelemetryListener&) = delete;

  int port() const { return port_; }
  // Also read from a publisher listening at "HOST:PORT". Throws Error(BadInput) for a malformed one.
  void dial(const std::string& address);
  // Accepts connections and reads what arrived, waiting up to `timeoutMs`.
  std::vector<TelemetryRecord> poll(int timeoutMs);
  int connections() const { return static_cast<int>(peers_.size()); }
  // Bytes of unfinished lines held for all peers (bounded: see kMaxPendingBytes).
  std::size_t pendingBytes() const {
    std::size_t n = 0;
    for (const auto& [fd, rest] : peers_) n += rest.size();
    return n;
  }
  std::int64_t badLines() const { return badLines_; }
  std::int64_t refusedConnections() const { return refusedConnections_; }  // over the peer limit

 private:
  int listenFd_ = -1;
  int port_ = 0;
  struct Dialled {
    SocketAddress address;
    int fd = -1;
    std::chrono::steady_clock::time_point nextAttempt{};
  };
  void redial();

  std::map<int, std::string> peers_;  // fd -> bytes of an unfinished line
  // Out of descriptors (EMFILE): the pending connection keeps the socket readable, and poll()
  // returned at once, a loop at 100 % CPU; accepting waits until then instead.
  std::chrono::steady_clock::time_point acceptAgainAt_{};
  std::vector<Dialled> dialled_;
  std::size_t firstPeer_ = 0;  // where the next poll starts reading (round robin)
  std::int64_t badLines_ = 0;
  std::int64_t refusedConnections_ = 0;
};

}  // namespace stoker
