#include "telemetry/socket_address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace stoker {
namespace {

// Where a connection goes: the host's first address (an empty host: this machine).
bool resolve(const SocketAddress& a, sockaddr_storage& out, socklen_t& len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  const char* host = a.host.empty() ? "127.0.0.1" : a.host.c_str();
  if (getaddrinfo(host, port.c_str(), &hints, &res) != 0 || !res) return false;
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

}  // namespace

SocketAddress parseSocketAddress(const std::string& text) {
  std::string rest = text;
  if (rest.rfind("tcp://", 0) == 0) rest = rest.substr(6);
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) throwBadInput("address " + text, "expected HOST:PORT or :PORT");
  SocketAddress a;
  a.host = rest.substr(0, colon);
  const bool bracketed = a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']';
  if (bracketed) a.host = a.host.substr(1, a.host.size() - 2);
  // A host name or an IP literal: printable, no spaces, slashes or brackets; an IPv6 literal
  // (it has colons) comes in brackets, so that HOST:PORT stays unambiguous.
  for (const char c : a.host)
    if (c <= ' ' || c > '~' || c == '/' || c == '[' || c == ']' || (c == ':' && !bracketed))
      throwBadInput("address " + text, "the host must be a name or an IP address ([IPv6]:PORT in brackets)");
  if (bracketed && a.host.empty()) throwBadInput("address " + text, "empty brackets where the host belongs");
  const std::string port = rest.substr(colon + 1);
  bool digits = !port.empty() && port.size() <= 5;
  for (const char c : port) digits = digits && c >= '0' && c <= '9';
  const long p = digits ? std::strtol(port.c_str(), nullptr, 10) : -1;
  if (p < 0 || p > 65535) throwBadInput("address " + text, "the port must be 0-65535");
  a.port = static_cast<int>(p);
  return a;
}

int connectNonBlocking(const SocketAddress& a) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (!resolve(a, addr, len)) return -1;
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

namespace {

int bindAndListen(const sockaddr* addr, socklen_t len, bool dualStack, int& err) {
  const int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (dualStack && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) {
    err = EAFNOSUPPORT;  // IPv6 alone would refuse IPv4 scrapers: IPv4's any address instead
    close(fd);
    return -1;
  }
  if (bind(fd, addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    err = errno;
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// ":PORT" (any interface) listens on IPv6's and IPv4's at once ([::] without IPV6_V6ONLY), or on
// IPv4's where the kernel has no IPv6: getaddrinfo's first answer was 0.0.0.0, and an IPv6-only
// scraper was refused. A named host takes the first of its addresses that binds.
int listenOn(const SocketAddress& a) {
  int err = 0;
  if (a.host.empty()) {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(static_cast<std::uint16_t>(a.port));
    int fd = bindAndListen(reinterpret_cast<sockaddr*>(&any6), sizeof any6, true, err);
    if (fd >= 0) return fd;
    // No IPv6 here (a kernel without it, a sandbox that refuses its sockets): IPv4's any address. A
    // port in use is the same on both: said as it is.
    if (err == EADDRINUSE) throwIo(a.text(), "cannot listen", err);
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(static_cast<std::uint16_t>(a.port));
    fd = bindAndListen(reinterpret_cast<sockaddr*>(&any4), sizeof any4, false, err);
    if (fd < 0) throwIo(a.text(), "cannot listen", err);
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res) != 0 || !res) throwBadInput("address " + a.text(), "cannot resolve the host");
  int fd = -1;
  for (const addrinfo* r = res; r && fd < 0; r = r->ai_next) fd = bindAndListen(r->ai_addr, r->ai_addrlen, false, err);
  freeaddrinfo(res);
  if (fd < 0) throwIo(a.text(), "cannot listen", err);
  return fd;
}

int boundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void keepAlive(int fd, int idleS, int intervalS, int count) {
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idleS, sizeof idleS);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intervalS, sizeof intervalS);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace stoker
