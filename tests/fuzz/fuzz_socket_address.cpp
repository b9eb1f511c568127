// Fuzz target: telemetry addresses ("HOST:PORT", ":PORT", "tcp://HOST:PORT"); parsing only, no
// socket is opened.
#include <string>

#include "fuzz_target.h"
#include "telemetry/socket_address.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(socket_address) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const stoker::SocketAddress a = stoker::parseSocketAddress(text);
  check(a.port >= 0 && a.port <= 65535, "ports are in range");
  const stoker::SocketAddress again = stoker::parseSocketAddress(a.text());
  check(again.host == a.host && again.port == a.port, "an address prints and parses back");
}
