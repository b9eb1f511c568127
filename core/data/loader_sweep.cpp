#include "data/loader_sweep.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/progress.h"

namespace stoker {

SweepAxis parseSweepAxis(const std::string& knob, const std::string& commaValues) {
  SweepAxis axis;
  axis.knob = knob;
  std::string item;
  auto flush = [&] {
    std::size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    std::string v = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    item.clear();
    if (v.empty()) return;
    // Numbers and booleans as they are; anything else is a name (a JSON string).
    nlohmann::json parsed = nlohmann::json::parse(v, nullptr, false);
    axis.values.push_back(parsed.is_discarded() || parsed.is_object() || parsed.is_array() ? nlohmann::json(v).dump()
                                                                                             : parsed.dump());
  };
  for (char c : commaValues) {
    if (c == ',') flush();
    else item += c;
  }
  flush();
  if (axis.values.empty()) throwBadInput(knob, "no values to sweep");
  return axis;
}

std::vector<SweepPoint> sweepPoints(const LoaderOptions& base, const std::vector<SweepAxis>& axes) {
  if (axes.empty()) throwBadInput("sweep", "choose at least one knob");
  const nlohmann::json baseJson = nlohmann::json::parse(loaderOptionsToJson(base));
  std::size_t count = 1;
  for (const auto& a : axes) {
    if (!baseJson.contains(a.knob)) throwBadInput(a.knob, "not a loader knob");
    if (a.values.empty()) throwBadInput(a.knob, "no values to sweep");
    count *= a.values.size();
    if (count > 256) throwBadInput("sweep", "more than 256 combinations; choose fewer values");
  }
  std::vector<SweepPoint> points;
  for (std::size_t i = 0; i < count; ++i) {
    SweepPoint p;
    nlohmann::json j = baseJson;
    std::size_t rest = i;
    for (auto it = axes.rbegin(); it != axes.rend(); ++it) {  // last axis varies fastest
      const std::string& v = it->values[rest % it->values.size()];
      rest /= it->values.size();
      p.values.insert(p.values.begin(), v);
      j[it->knob] = nlohmann::json::parse(v, nullptr, false);
    }
    try {
      p.options = loaderOptionsFromJson(j.dump(), "sweep");
    } catch (const Error& e) {
      // A wrong type is the user's axis, not this combination: refuse the sweep.
      const std::string& r = e.reason();
      if (r.rfind("must be a ", 0) == 0 || r.rfind("must be an ", 0) == 0 || r.rfind("unknown value", 0) == 0) throw;
      p.options = base;
      p.error = e.what();
    }
    points.push_back(std::move(p));
  }
  return points;
}

// The knobs a dataset reads when it is opened: a trial or sweep point that changes one reads the
// dataset opened with it (cache_dir and cache_limit pick the part cache, skip_bad_samples decides
// what a WebDataset scan keeps; a sweep over cache_dir measured the first point's every time).
bool datasetKnobsDiffer(const LoaderOptions& a, const LoaderOptions& b) {
  return a.reader_mode != b.reader_mode || a.part_size != b.part_size || a.max_inflight_parts != b.max_inflight_parts ||
         a.transforms != b.transforms || a.cache_dir != b.cache_dir || a.cache_limit != b.cache_limit ||
         a.skip_bad_samples != b.skip_bad_samples;
}

SweepResult runSweep(const DatasetOpener& open, const LoaderOptions& base, const std::vector<SweepAxis>& axes,
                     const std::vector<DeviceSpec>& devices, const LoaderSessionOptions& session,
                     const MeasureSpec& measure, const CancelToken* cancel,
                     const std::function<void(const SweepPoint&, int, int)>& onPoint) {
  SweepResult result;
  result.points = sweepPoints(base, axes);
  const int n = static_cast<int>(result.points.size());
  std::shared_ptr<Dataset> dataset;
  LoaderOptions openedWith;
  for (int i = 0; i < n; ++i) {
    if (cancel) cancel->throwIfCancelled("sweep");
    SweepPoint& p = result.points[i];
    if (p.error.empty()) {
      try {
        if (!dataset || datasetKnobsDiffer(openedWith, p.options)) {
          p.reopened = dataset != nullptr;
          dataset.reset();  // the old one's memory goes before the new one is read
          dataset = open(p.options);
          openedWith = p.options;
          result.datasetOpens++;
        }
        p.measurement = measureLoader(dataset, p.options, devices, session, measure, cancel);
        p.samplesPerS = p.measurement.samplesPerS;
        p.bytesPerS = p.measurement.bytesPerS;
        p.mode = p.measurement.mode;
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        p.error = e.what();
      }
    }
    if (p.error.empty() && (result.bestIndex < 0 || p.samplesPerS > result.points[result.bestIndex].samplesPerS))
      result.bestIndex = i;
    if (onPoint) onPoint(p, i, n);
  }
  if (result.bestIndex >= 0) {
    const Measurement& best = result.points[static_cast<std::size_t>(result.bestIndex)].measurement;
    for (int i = 0; i < n; ++i) {
      SweepPoint& p = result.points[static_cast<std::size_t>(i)];
      p.noClearDifference = i != result.bestIndex && p.error.empty() && !clearlyDifferent(p.measurement, best);
    }
  }
  return result;
}

}  // namespace stoker
