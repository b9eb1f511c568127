#include "data/loader_measure.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "util/error.h"
#include "util/progress.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

// Collects each device's window rates after the warm-up.
class WindowCollector : public TelemetryObserver {
 public:
  explicit WindowCollector(double warmupUntilUnix) : warmupUntil_(warmupUntilUnix) {}
  void onRecord(const TelemetryRecord& r) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& d = devices_[r.device];
    // An epoch's end flushes its window however short: the last batch over a few microseconds
    // read as 438,000 samples/s on a remote dataset doing 170, and decided the tuner's intervals.
    // But an epoch shorter than a window (Fashion-MNIST at 1.5 M samples/s: 40 ms) has only its
    // end's record, which covers the whole epoch: taken, or no trial had a window (+-100 %).
    const bool wholeEpoch = r.epoch_end && d.lastEpoch != r.epoch;
    d.lastEpoch = r.epoch;
    if ((r.epoch_end && !wholeEpoch) || r.time < warmupUntil_ || frozen_.load()) return;
    d.rates.push_back(r.samples_per_s);
    d.bytes.push_back(r.bytes_per_s);
  }
  struct Device {
    std::vector<double> rates, bytes;
    std::int64_t lastEpoch = -1;  // the epoch of this device's last record (windows before its end)
  };
  std::map<std::string, Device> snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return devices_;
  }
  // No more windows: stopping the run emits a truncated last one per device.
  void freeze() { frozen_.store(true); }

 private:
  std::atomic<bool> frozen_{false};
  double warmupUntil_;
  mutable std::mutex mutex_;
  std::map<std::string, Device> devices_;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// Sum over devices of the mean rate, and the 95 % half-width of that sum.
Measurement summarise(const std::map<std::string, WindowCollector::Device>& devices) {
  Measurement m;
  double variance = 0;
  bool enough = !devices.empty();
  std::vector<double> pooled;  // each window scaled to a whole-run rate by the device count
  for (const auto& [name, d] : devices) {
    m.windows += static_cast<int>(d.rates.size());
    if (d.rates.size() < 3) {
      enough = false;
      continue;
    }
    // A 10 % trimmed mean: one window that caught a thread start or a page-fault storm should
    // not decide between two settings (a setting that stalls often still shows in many windows).
    std::vector<double> sorted = d.rates;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t trim = sorted.size() / 10;
    const std::vector<double> kept(sorted.begin() + static_cast<std::ptrdiff_t>(trim),
                                   sorted.end() - static_cast<std::ptrdiff_t>(trim));
    const auto n = static_cast<double>(kept.size());
    const double mu = mean(kept);
    double ss = 0;
    for (double x : kept) ss += (x - mu) * (x - mu);
    variance += ss / (n - 1) / n;
    m.samplesPerS += mu;
    m.bytesPerS += mean(d.bytes);
    for (double x : d.rates) pooled.push_back(x * static_cast<double>(devices.size()));
  }
  m.ciHalfWidth = enough ? 1.96 * std::sqrt(variance) : m.samplesPerS;
  m.median = quantile(pooled, 0.5);
  m.p10 = quantile(pooled, 0.1);
  m.p90 = quantile(pooled, 0.9);
  return m;
}

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool clearlyDifferent(const Measurement& a, const Measurement& b) {
  return a.samplesPerS - a.ciHalfWidth > b.samplesPerS + b.ciHalfWidth ||
         b.samplesPerS - b.ciHalfWidth > a.samplesPerS + a.ciHalfWidth;
}

Measurement measureLoader(std::shared_ptr<Dataset> dataset, const LoaderOptions& options,
                          const std::vector<DeviceSpec>& devices, const LoaderSessionOptions& session,
                          const MeasureSpec& spec, const CancelToken* cancel) {
  if (!(spec.maxSeconds > 0) || !(spec.targetRelativeCi > 0) || spec.windowMs < 1)
    throwBadInput("measure", "needs a positive time cap, target and window");
  LoaderOptions o = options;
  o.telemetry_interval_ms = spec.windowMs;
  LoaderSessionOptions so = session;
  so.epochs = 0;  // until the measurement is good enough
  so.onRetuned = nullptr;
  so.openCancel = cancel;
  auto collector = std::make_shared<WindowCollector>(unixNow() + spec.warmupSeconds);
  so.observers.push_back(collector);
  LoaderSession run(std::move(dataset), o, devices, so);  // opens the loaders (resident uploads) before the clock

  CancelToken stop;
  bool userCancelled = false;
  Measurement m;
  const auto start = Clock::now();
  std::mutex doneMutex;
  bool done = false;
  std::condition_variable doneCv;
  // Watches the windows and the clock; stops the run when the figure is good enough.
  std::thread watch([&] {
    std::unique_lock<std::mutex> lock(doneMutex);
    while (!doneCv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done; })) {
      if (cancel && cancel->cancelled()) {
        userCancelled = true;
        collector->freeze();
        stop.cancel();
        return;
      }
      const double measured = std::chrono::duration<double>(Clock::now() - start).count() - spec.warmupSeconds;
      if (measured < spec.minSeconds) continue;
      const Measurement now = summarise(collector->snapshot());
      if ((now.samplesPerS > 0 && now.relativeCi() <= spec.targetRelativeCi) || measured >= spec.maxSeconds) {
        collector->freeze();
        stop.cancel();
        return;
      }
    }
  });
  LoaderSessionResult result;
  try {
    result = run.run(nullptr, &stop);
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(doneMutex);
      done = true;
    }
    doneCv.notify_all();
    watch.join();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(doneMutex);
    done = true;
  }
  doneCv.notify_all();
  watch.join();
  if (userCancelled) throw Error(ErrorKind::Cancelled, "measure", "cancelled");
  collector->freeze();  // the run ended on its own (an error would have thrown)
  m = summarise(collector->snapshot());
  m.seconds = std::max(0.0, std::chrono::duration<double>(Clock::now() - start).count() - spec.warmupSeconds);
  m.converged = m.samplesPerS > 0 && m.relativeCi() <= spec.targetRelativeCi;
  if (m.samplesPerS <= 0) {  // no window after the warm-up (a very slow setting): the epochs' rate, unsure
    m.samplesPerS = result.samplesPerS;
    m.bytesPerS = result.bytesPerS;
    m.median = m.p10 = m.p90 = m.samplesPerS;
    m.ciHalfWidth = m.samplesPerS;
  }
  if (!result.devices.empty()) m.mode = loadingModeName(result.devices.front().mode);
  return m;
}

}  // namespace stoker
