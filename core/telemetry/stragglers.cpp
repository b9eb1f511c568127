#include "telemetry/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "telemetry/input_bound.h"

namespace stoker {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

constexpr double kZCutOff = 3.5;
constexpr double kMinGapMs = 1.0;
constexpr double kMinGapShare = 0.05;

}  // namespace

std::vector<Straggler> findStragglers(const std::vector<RankTiming>& ranks) {
  std::vector<Straggler> out;
  std::vector<RankTiming> valid;
  for (const auto& r : ranks)
    if (std::isfinite(r.data_wait_ms) && std::isfinite(r.step_ms) && r.data_wait_ms >= 0 && r.step_ms >= 0)
      valid.push_back(r);
  if (valid.size() < 2) return out;
  if (valid.size() == 2) {
    for (int i = 0; i < 2; ++i) {
      const RankTiming& a = valid[i];
      const RankTiming& b = valid[1 - i];
      const double shareA = dataWaitShare(a.data_wait_ms, a.step_ms), shareB = dataWaitShare(b.data_wait_ms, b.step_ms);
      const double iteration = a.data_wait_ms + a.step_ms;
      if (classifyInputBound(shareA) == InputBound::InputBound && classifyInputBound(shareB) != InputBound::InputBound &&
          a.data_wait_ms - b.data_wait_ms >= std::max(kMinGapMs, kMinGapShare * iteration))
        out.push_back({a.rank, a.device, "data wait", a.data_wait_ms, b.data_wait_ms, 0});
    }
    return out;
  }
  const auto check = [&](const char* metric, double RankTiming::*field) {
    std::vector<double> values, iterations;
    for (const auto& r : valid) {
      values.push_back(r.*field);
      iterations.push_back(r.data_wait_ms + r.step_ms);
    }
    const double m = median(values);
    std::vector<double> deviations;
    for (double v : values) deviations.push_back(std::fabs(v - m));
    // 1.4826 MAD estimates a normal spread. When over half the ranks agree exactly (MAD = 0),
    // any rank apart from them is infinitely far in those units: the absolute gap decides.
    const double scale = 1.4826 * median(deviations);
    const double typicalIteration = median(iterations);
    for (const auto& r : valid) {
      const double v = r.*field;
      const double z = scale > 0 ? (v - m) / scale : (v > m ? HUGE_VAL : 0.0);
      if (z > kZCutOff && v - m >= std::max(kMinGapMs, kMinGapShare * typicalIteration))
        out.push_back({r.rank, r.device, metric, v, m, z});
    }
  };
  check("data wait", &RankTiming::data_wait_ms);
  check("step", &RankTiming::step_ms);
  return out;
}

std::vector<RankTiming> liveRankTimings(const std::vector<const TelemetryRecord*>& latest, double staleSeconds) {
  double newest = 0;
  for (const TelemetryRecord* r : latest) newest = std::max(newest, r->time);
  std::map<std::pair<int, std::string>, const TelemetryRecord*> current;
  for (const TelemetryRecord* r : latest) {
    if (newest - r->time > staleSeconds) continue;
    const TelemetryRecord*& c = current[{r->rank, r->device}];
    if (!c || r->time > c->time) c = r;
  }
  std::vector<RankTiming> out;
  for (const auto& [key, r] : current) out.push_back({r->rank, r->device, r->data_wait_ms, r->step_ms});
  return out;
}

std::string describeStraggler(const Straggler& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "rank %d (%s): %s %.1f ms vs %.1f ms typical of the others", s.rank, s.device.c_str(),
                s.metric.c_str(), s.value_ms, s.median_ms);
  return buf;
}

}  // namespace stoker
