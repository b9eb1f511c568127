// Loader soak: 10,000 short epochs (by default) with random cancels (from the consumer and from
// another thread), timeouts, worker exceptions, epochs dropped half-way and re-configurations
// (a new Loader with random workers, prefetch, mode, device, batch size, persistence, buffer
// reuse every few epochs). Every 250 epochs, between loaders, it samples the process: threads,
// open file descriptors, RSS, and the pool blocks the loaders allocated after their first epoch.
//
// Passes when the curves are flat (threads and fds equal to the start, RSS within a bound of
// its value after warm-up, no pool growth after a loader's first epoch), every epoch ends the
// way its fault says (full batch count, Cancelled, Timeout, or the worker's error naming the
// planted sample), and the watchdog never fires (no batch or epoch for 60 s = deadlock: it
// prints what was running and exits 3). Prints the curve as CSV lines and a verdict.
#include <dirent.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "data/loader.h"
#include "util/error.h"
#include "util/progress.h"

using namespace stoker;

namespace {

long statusField(const char* name) {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == name) {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

int openFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own fd
}

// x[i] = i (float [16]), y[i] = i; sample `failAt` throws, sample `slowAt` sleeps.
class FlakyDataset : public Dataset {
 public:
  explicit FlakyDataset(std::int64_t n) : n_(n) {
    specs_ = {{"x", c10::ScalarType::Float, {16}, 64}, {"y", c10::ScalarType::Long, {}, 8}};
  }
  std::string description() const override { return "flaky"; }
  std::int64_t size() const override { return n_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override {
    if (index == failAt.load()) throw std::runtime_error("planted failure");
    if (index == slowAt.load()) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto* x = reinterpret_cast<float*>(dst[0]);
    for (int k = 0; k < 16; ++k) x[k] = static_cast<float>(index);
    *reinterpret_cast<std::int64_t*>(dst[1]) = index;
  }
  mutable std::atomic<std::int64_t> failAt{-1}, slowAt{-1};

 private:
  std::int64_t n_;
  std::vector<FieldSpec> specs_;
};

std::atomic<std::int64_t> heartbeat{0};
std::mutex stateMutex;
std::string state = "starting";

void setState(const std::string& s) {
  std::lock_guard<std::mutex> lock(stateMutex);
  state = s;
}

}  // namespace

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 10000;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 1;
  std::mt19937 rng(seed);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  at::set_num_threads(1);

  const int threads0 = static_cast<int>(statusField("Threads:"));  // before the watchdog's own
  const int fds0 = openFds();
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    std::int64_t last = -1;
    auto since = std::chrono::steady_clock::now();
    while (!done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const std::int64_t now = heartbeat.load();
      if (now != last) {
        last = now;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since > std::chrono::seconds(60)) {
        std::lock_guard<std::mutex> lock(stateMutex);
        std::printf("WATCHDOG: no progress for 60 s (deadlock?) while: %s\n", state.c_str());
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
  });

  long rssWarm = -1, rssMax = 0;
  int threadsMax = threads0, fdsMax = fds0;
  std::int64_t poolGrowth = 0, cancels = 0, timeouts = 0, workerErrors = 0, dropped = 0, full = 0, loaders = 0;
  int wrongEndings = 0;
  std::printf("loader soak: %d epochs, seed %u\n", epochs, seed);
  std::printf("csv,epoch,threads,fds,rss_mib,pool_growth\n");

  int e = 0;
  while (e < epochs) {
    // A new configuration.
    auto dataset = std::make_shared<FlakyDataset>(pick(20, 400));
    LoaderOptions o;
    o.batch_size = pick(1, 48);
    o.drop_last = pick(0, 1);
    o.num_workers = pick(0, 3);
    o.prefetch = pick(1, 8);
    o.persistent_workers = pick(0, 1);
    o.reuse_buffers = pick(0, 1);
    o.loading_mode = pick(0, 1) ? LoadingMode::Streaming : LoadingMode::Resident;
    o.pin_memory = false;
    o.seed = static_cast<std::uint64_t>(pick(0, 1000));
    const bool withTimeout = pick(0, 3) == 0;
    o.timeout = withTimeout ? 0.1 : 0;
    const std::string device = pick(0, 1) ? "cpu" : "sim:0";
    const int lifetime = pick(1, 20);
    char desc[256];
    std::snprintf(desc, sizeof desc, "%s n=%lld batch=%lld workers=%d prefetch=%d persistent=%d reuse=%d %s timeout=%g",
                  device.c_str(), static_cast<long long>(dataset->size()), static_cast<long long>(o.batch_size),
                  o.num_workers, o.prefetch, o.persistent_workers, o.reuse_buffers,
                  o.loading_mode == LoadingMode::Streaming ? "streaming" : "resident", o.timeout);
    std::deque<CancelToken> tokens(1);  // a fresh token per cancelled epoch; old ones outlive the loader
    std::int64_t poolAfterFirst = -1;
    {
      Loader loader(dataset, o, DeviceSpec::parse(device));
      ++loaders;
      loader.setCancelToken(&tokens.back());
      const bool streaming = loader.mode() == LoadingMode::Streaming;
      for (int k = 0; k < lifetime && e < epochs; ++k, ++e) {
        // This epoch's fault.
        const int fault = pick(0, 99);
        enum { None, ConsumerCancel, ThreadCancel, WorkerError, Slow, Drop } kind = None;
        if (fault < 8) kind = ConsumerCancel;
        else if (fault < 14) kind = ThreadCancel;
        else if (fault < 24 && streaming) kind = WorkerError;
        // (The timeout cannot fire with num_workers = 0 yet: issue 15 owns that.)
        else if (fault < 34 && streaming && withTimeout && o.num_workers > 0) kind = Slow;
        else if (fault < 40) kind = Drop;
        const std::int64_t planted = pick(0, static_cast<int>(dataset->size() - 1));
        dataset->failAt = kind == WorkerError ? planted : -1;
        dataset->slowAt = kind == Slow ? planted : -1;
        setState(std::string(desc) + ", epoch " + std::to_string(e) + ", fault " + std::to_string(kind));
        std::int64_t batches = 0;
        const std::int64_t stopAfter = pick(0, 5);
        std::thread canceller;
        std::string ending = "complete";
        try {
          Epoch epoch = loader.epoch(e);
          if (kind == ThreadCancel)
            canceller = std::thread([&token = tokens.back(), us = pick(0, 3000)] {
              std::this_thread::sleep_for(std::chrono::microseconds(us));
              token.cancel();
            });
          while (auto batch = epoch.next()) {
            ++batches;
            heartbeat.fetch_add(1);
            const auto y = (*batch)["y"];
            if (y.size(0) != batch->indices.size(0)) ending = "wrong batch";
            if (kind == ConsumerCancel && batches > stopAfter) tokens.back().cancel();
            if (kind == Drop && batches > stopAfter) break;
          }
          if (kind == Drop && batches > stopAfter) ending = "dropped";
        } catch (const Error& err) {
          ending = err.kind() == ErrorKind::Cancelled ? "cancelled"
                   : err.kind() == ErrorKind::Timeout ? "timeout"
                   : std::string(err.what()).find("sample " + std::to_string(planted)) != std::string::npos ? "worker error"
                                                                                                         : err.what();
        }
        if (canceller.joinable()) canceller.join();
        heartbeat.fetch_add(1);
        // Does the ending match the fault? A cancel may land after the last batch.
        const bool cancelKind = kind == ConsumerCancel || kind == ThreadCancel;
        // A cancel may land after the last batch, so cancel faults may also complete.
        bool fine = ending == "complete" ? true
                    : ending == "cancelled" ? cancelKind
                    : ending == "timeout" ? kind == Slow
                    : ending == "worker error" ? kind == WorkerError
                    : ending == "dropped" ? kind == Drop : false;
        if (ending == "complete" && (kind == WorkerError || kind == Slow)) {
          // The planted sample may fall in a dropped tail (drop_last) -- only then may it complete.
          fine = o.drop_last && batches == loader.batchesPerEpoch();
        }
        if (ending == "complete" && kind == None && batches != loader.batchesPerEpoch()) fine = false;
        if (!fine) {
          ++wrongEndings;
          std::printf("WRONG ENDING: %s, epoch %d, fault %d: %s after %lld batches\n", desc, e, kind, ending.c_str(),
                      static_cast<long long>(batches));
        }
        if (ending == "cancelled") ++cancels;
        else if (ending == "timeout") ++timeouts;
        else if (ending == "worker error") ++workerErrors;
        else if (ending == "dropped") ++dropped;
        else if (ending == "complete") ++full;
        // A fresh token for the next epoch (a cancelled token stays cancelled).
        if (tokens.back().cancelled()) {
          tokens.emplace_back();
          loader.setCancelToken(&tokens.back());
        }
        if (k == 0) poolAfterFirst = loader.poolAllocations();
        // A pool keeps allocating only when blocks never come back: allow for the ring's
        // first use in an epoch that the first one cut short.
        if (poolAfterFirst >= 0)
          poolGrowth = std::max<std::int64_t>(poolGrowth, loader.poolAllocations() - poolAfterFirst - 2 * (o.prefetch + o.num_workers + 2));
      }
    }
    if (e >= 250 && (e / 250) != ((e - lifetime) / 250)) {
      const int threads = static_cast<int>(statusField("Threads:"));
      const int fds = openFds();
      const long rss = statusField("VmRSS:");
      if (rssWarm < 0 && e >= 1000) rssWarm = rss;
      rssMax = std::max(rssMax, rss);
      threadsMax = std::max(threadsMax, threads);
      fdsMax = std::max(fdsMax, fds);
      std::printf("csv,%d,%d,%d,%.1f,%lld\n", e, threads, fds, rss / 1024.0, static_cast<long long>(poolGrowth));
      std::fflush(stdout);
    }
  }
  done = true;
  watchdog.join();
  const int threadsEnd = static_cast<int>(statusField("Threads:"));
  const int fdsEnd = openFds();
  const long rssEnd = statusField("VmRSS:");
  std::printf("%d epochs on %lld loaders: %lld complete, %lld cancelled, %lld timeouts, %lld worker errors, %lld dropped\n",
              e, static_cast<long long>(loaders), static_cast<long long>(full), static_cast<long long>(cancels),
              static_cast<long long>(timeouts), static_cast<long long>(workerErrors), static_cast<long long>(dropped));
  std::printf("threads %d -> %d (max %d, the watchdog included), fds %d -> %d (max %d), RSS after warm-up %.1f MiB, max %.1f, end %.1f\n",
              threads0, threadsEnd, threadsMax, fds0, fdsEnd, fdsMax, rssWarm / 1024.0, rssMax / 1024.0, rssEnd / 1024.0);
  bool ok = true;
  auto fail = [&ok](const char* what) {
    std::printf("FAIL: %s\n", what);
    ok = false;
  };
  if (threadsEnd != threads0) fail("threads left behind");
  if (fdsEnd != fds0) fail("file descriptors left open");
  if (rssWarm > 0 && rssMax - rssWarm > 64 * 1024) fail("RSS grew by more than 64 MiB after warm-up");
  if (poolGrowth > 0) fail("a loader's pool kept allocating blocks after its first epoch");
  if (wrongEndings) fail("epochs ended differently from their fault");
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
