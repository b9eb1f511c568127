// Telemetry under attack: a TelemetryListener (what `stoker monitor` and the Monitor run) fed
// 100,000 hostile lines -- huge, truncated, binary, deeply nested JSON, wrong types -- plus
// slow-loris connections and 1,000 simultaneous connections, while one honest publisher keeps
// sending. Then a publisher whose peer accepts but never reads.
//
// Passes when: the honest records keep arriving in every second of the attack; every hostile
// line is refused (counted, never delivered); the process's RSS stays within a bound; and the
// stalled publisher's onRecord() never blocks (a quarter second at worst, which a blocking send
// would exceed forever; it drops and counts instead).
// Prints one line per second (received, refused, connections, RSS) and a verdict; exit 1 on
// failure. A soak program, not a timed test: `packaging/stoker.sh soak` runs it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/socket_address.h"
#include "telemetry/telemetry_listener.h"
#include "telemetry/telemetry_publisher.h"

using namespace stoker;
using Clock = std::chrono::steady_clock;

namespace {

long rssKiB() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

int connectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

bool sendAll(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// One hostile line of each kind in turn (newline-terminated, except the huge ones).
std::string hostileLine(std::mt19937& rng, std::uint64_t i) {
  switch (i % 8) {
    case 0: return "{\"rank\": 1, \"host\": \"x\"";  // truncated
    case 1: {                                         // binary
      std::string b(64 + rng() % 512, '\0');
      for (auto& c : b) c = static_cast<char>(rng() % 256);
      std::replace(b.begin(), b.end(), '\n', ' ');
      return b;
    }
    case 2: return std::string(20000, '[') + std::string(20000, ']');  // deeply nested
    case 3: return "{\"rank\": \"zero\", \"samples_per_s\": [1,2]}";    // wrong types
    case 4: return "[1, 2, 3]";                                         // not an object
    case 5: return "{\"rank\": 1e999999, \"time\": -1e400}";            // out-of-range numbers
    case 6: return "{\"host\": \"\\ud800\", \"device\": \"\\u0000\"}";  // lone surrogate, NUL
    default: return std::string(4096, ' ') + "{\"a\":" + std::string(200, '{');
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t hostileLines = argc > 1 ? std::stoull(argv[1]) : 100000;
  const int simultaneous = argc > 2 ? std::stoi(argv[2]) : 1000;
  const int slowLoris = 200;
  // 1,000 connections plus our own: make sure the fd limit is not the test's own bottleneck.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);

  TelemetryListener listener("127.0.0.1:0");
  const int port = listener.port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> good{0}, hostileDelivered{0}, records{0};

  const long rssStart = rssKiB();
  long rssMax = rssStart;
  bool starved = false;
  std::printf("telemetry hostile: listener %s, %llu hostile lines, %d simultaneous connections, %d slow-loris\n",
              address.c_str(), static_cast<unsigned long long>(hostileLines), simultaneous, slowLoris);

  // The honest publisher: rank 0, host "honest", 100 records/s.
  std::thread honest([&] {
    TelemetryPublisher pub({address});
    TelemetryRecord r;
    r.host = "honest";
    r.device = "cpu";
    while (!stop) {
      ++r.step;
      pub.onRecord(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });

  // Hostile lines over 8 connections; each connection reconnects when the listener cuts it.
  std::atomic<std::uint64_t> hostileSent{0};
  std::vector<std::thread> attackers;
  for (int a = 0; a < 8; ++a)
    attackers.emplace_back([&, a] {
      std::mt19937 rng(a);
      int fd = -1;
      for (std::uint64_t i = a; i < hostileLines && !stop; i += 8) {
        if (fd < 0 && (fd = connectTo(port)) < 0) continue;
        std::string line = hostileLine(rng, i);
        if (i % 997 == 0) line = std::string(3 << 20, 'x');  // over the 256 KiB line limit: cut off
        if (!sendAll(fd, line + "\n")) {
          close(fd);
          fd = -1;
        }
        hostileSent.fetch_add(1);
      }
      if (fd >= 0) close(fd);
    });

  // Slow loris: a byte at a time, never a newline.
  std::thread loris([&] {
    std::vector<int> fds;
    for (int i = 0; i < slowLoris; ++i)
      if (int fd = connectTo(port); fd >= 0) fds.push_back(fd);
    while (!stop) {
      for (int fd : fds) send(fd, "{", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : fds) close(fd);
  });

  // Many simultaneous connections that connect and say nothing.
  std::vector<int> idle;
  std::thread crowd([&] {
    for (int i = 0; i < simultaneous && !stop; ++i)
      if (int fd = connectTo(port); fd >= 0) idle.push_back(fd);
  });

  // The monitor's loop: poll, count, print a line per second.
  auto start = Clock::now(), lastPrint = start;
  std::int64_t goodAtLastPrint = 0;
  int seconds = 0;
  while (true) {
    for (const auto& r : listener.poll(50)) {
      ++records;
      if (r.host == "honest") ++good;
      else ++hostileDelivered;
    }
    rssMax = std::max(rssMax, rssKiB());
    const auto now = Clock::now();
    if (now - lastPrint >= std::chrono::seconds(1)) {
      ++seconds;
      const std::int64_t g = good.load();
      std::printf("t=%2ds honest %6lld (+%lld)  refused %8lld  hostile sent %8llu  connections %5d  rss %6ld MiB\n",
                  seconds, static_cast<long long>(g), static_cast<long long>(g - goodAtLastPrint),
                  static_cast<long long>(listener.badLines()), static_cast<unsigned long long>(hostileSent.load()),
                  listener.connections(), rssKiB() / 1024);
      std::fflush(stdout);
      // From the honest publisher's first record on (it connects within its 1 s retry interval).
      if (goodAtLastPrint > 0 && g == goodAtLastPrint) starved = true;
      goodAtLastPrint = g;
      lastPrint = now;
    }
    const bool attackDone = hostileSent.load() >= hostileLines;
    if ((attackDone && seconds >= 3) || now - start > std::chrono::seconds(300)) break;
  }
  stop = true;
  for (auto& t : attackers) t.join();
  loris.join();
  crowd.join();
  honest.join();
  for (int fd : idle) close(fd);
  const long rssGrowthMiB = (rssMax - rssStart) / 1024;

  // A publisher whose peer accepts and never reads: onRecord must stay instant.
  const int stalled = listenOn(parseSocketAddress("127.0.0.1:0"));
  const int stalledPort = boundPort(stalled);
  double worstMs = 0;
  std::int64_t dropped = 0, sent = 0;
  {
    TelemetryPublisher pub({"127.0.0.1:" + std::to_string(stalledPort)});
    std::thread acceptor([&] {
      for (int i = 0; i < 200 && accept4(stalled, nullptr, nullptr, SOCK_CLOEXEC) < 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    TelemetryRecord r;
    r.host = std::string(900, 'h');  // ~1 KiB lines fill the socket buffers quickly
    for (int i = 0; i < 200000; ++i) {
      const auto t0 = Clock::now();
      pub.onRecord(r);
      worstMs = std::max(worstMs, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    acceptor.join();
    pub.flush(200);
    dropped = pub.dropped();
    sent = pub.sent();
  }
  close(stalled);

  bool ok = true;
  auto fail = [&ok](const char* what) {
    std::printf("FAIL: %s\n", what);
    ok = false;
  };
  std::printf("listener: %lld honest records, %lld refused lines, %lld hostile records delivered; RSS %ld -> max %ld MiB (+%ld)\n",
              static_cast<long long>(good.load()), static_cast<long long>(listener.badLines()),
              static_cast<long long>(hostileDelivered.load()), rssStart / 1024, rssMax / 1024, rssGrowthMiB);
  std::printf("stalled peer: 200000 records, worst onRecord %.3f ms, %lld sent into the socket, %lld dropped\n", worstMs,
              static_cast<long long>(sent), static_cast<long long>(dropped));
  if (starved) fail("a second of the attack passed without an honest record");
  if (good.load() < 100) fail("too few honest records arrived");
  if (hostileDelivered.load() != 0) fail("a hostile line was delivered as a record");
  if (rssGrowthMiB > 256) fail("the listener's memory grew by more than 256 MiB");
  // A send that blocked on the stalled peer would hold onRecord until the peer reads -- forever.
  // Milliseconds are scheduling noise (2 cores, sanitizer builds); a quarter second is not.
  if (worstMs > 250) fail("onRecord blocked on a stalled peer");
  if (dropped == 0) fail("a stalled peer dropped nothing (the queue cannot be bounded)");
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
