// telemetry/socket_address: the "HOST:PORT" addresses telemetry travels to,
// and the few POSIX socket calls the publisher and listener share.
#pragma once

#include <string>

namespace stoker {

struct SocketAddress {
  std::string host;  // empty: any interface (listen) / localhost (connect)
  int port = 0;
  // HOST:PORT, with an IPv6 host in brackets.
  std::string text() const {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }
};

// "HOST:PORT", ":PORT" or "tcp://HOST:PORT"; throws Error(BadInput) naming the address.
SocketAddress parseSocketAddress(const std::string& text);
// A non-blocking TCP connection attempt; returns the fd (connecting or
// connected) or -1.
int connectNonBlocking(const SocketAddress& a);
// A listening, non-blocking TCP socket; throws Error(Io) when it cannot bind.
int listenOn(const SocketAddress& a);
// The port a listening socket got (for port 0).
int boundPort(int fd);
// Turns on TCP keepalive on a connection: a peer whose host died or lost the network (no FIN, no
// RST) is found dead after `idleS` seconds of silence plus `count` unanswered probes `intervalS`
// apart, and its reads fail, so it does not hold a slot for good. A peer that is alive but quiet
// (a job stopped in a debugger) answers the probes and stays. Failures are ignored (not TCP).
void keepAlive(int fd, int idleS = 60, int intervalS = 10, int count = 6);

}  // namespace stoker
