#include "data/loader_tune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/loader_sweep.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

std::string percentText(double x) {
  char t[32];
  std::snprintf(t, sizeof t, "%+.0f %%", 100 * x);
  return t;
}

}  // namespace

std::vector<std::pair<std::string, std::vector<std::string>>> defaultTuneCandidates(const LoaderOptions& base, int cores,
                                                                                     bool remoteDataset,
                                                                                     std::int64_t sampleBytes) {
  cores = std::max(1, cores);
  std::vector<std::string> workers;
  // A remote dataset's workers mostly wait for the network, a batch a round trip each: far from
  // the server more workers than cores read more. Uncached token windows (64 x 1024) from nginx
  // behind a 50 ms relay, on 2 cores: 3,682 windows/s with 2 workers, 10,256 with 8, 19,475 with
  // 16, 33,672 with 32, 41,272 with 64 (nginx direct: 50,960-73,480). Each worker holds a batch and
  // two in the ring, so image batches (38 MiB at 64 x 3 x 224 x 224) stop at 16.
  int mostWorkers = std::max(4, 2 * cores);
  if (remoteDataset) {
    mostWorkers = std::max(16, mostWorkers);
    if (sampleBytes > 0) {
      const std::int64_t batchBytes = sampleBytes * std::max<std::int64_t>(1, base.batch_size);
      mostWorkers = std::max(mostWorkers, static_cast<int>(std::min<std::int64_t>(64, remoteWorkerBytes / (3 * batchBytes))));
    }
  }
  for (int w : {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64})
    if (w <= mostWorkers) workers.push_back(std::to_string(w));
  std::vector<std::string> batch;
  for (std::int64_t b : {base.batch_size / 4, base.batch_size / 2, base.batch_size, base.batch_size * 2, base.batch_size * 4})
    if (b >= 1 && (batch.empty() || batch.back() != std::to_string(b))) batch.push_back(std::to_string(b));
  std::vector<std::pair<std::string, std::vector<std::string>>> out{{"num_workers", workers},
                                                                    {"prefetch", {"1", "2", "4", "8", "16", "32"}},
                                                                    {"batch_size", batch},
                                                                    {"pin_memory", {"false", "true"}},
                                                                    {"reuse_buffers", {"false", "true"}}};
  if (remoteDataset) {  // s3dlio's knobs: bytes per range request, requests in flight per worker
    out.push_back({"max_inflight_parts", {"1", "2", "4", "8", "16", "32", "64"}});
    out.push_back({"part_size", {"1048576", "4194304", "8388608", "16777216", "67108864"}});
  }
  return out;
}

// The least gain a move to another setting must show (see the comparison below).
constexpr double kMinGain = 0.03;

TuneResult autoTune(std::shared_ptr<Dataset> dataset, const LoaderOptions& base, const std::vector<DeviceSpec>& devices,
                    const LoaderSessionOptions& session, const TuneSpec& spec, const CancelToken* cancel,
                    const std::function<void(const TuneTrial&, double)>& onTrial) {
  if (!(spec.budgetSeconds > 0)) throwBadInput("budget", "must be a positive number of seconds");
  validateLoaderOptions(base);
  const auto candidates = spec.candidates.empty()
                              ? defaultTuneCandidates(base, static_cast<int>(std::thread::hardware_concurrency()),
                                                      spec.remoteDataset && spec.reopen, dataset->sampleBytes())
                              : spec.candidates;
  const nlohmann::json baseJson = nlohmann::json::parse(loaderOptionsToJson(base));
  std::size_t points = 1;
  for (const auto& [knob, values] : candidates) {
    if (!baseJson.contains(knob)) throwBadInput(knob, "not a loader knob");
    points += values.size();
  }
  // Per point: enough for the first pass to fit the budget, 0.3-4 s -- up to 15 s on a remote
  // dataset, whose batches come seconds apart behind a slow link (4 s gave intervals of +-40-100 %).
  MeasureSpec measure = spec.measure;
  const double cap = std::max(0.3, spec.remoteDataset ? 15.0 : std::min(4.0, spec.measure.maxSeconds));  // clamp's bounds in order
  measure.maxSeconds = std::clamp(spec.budgetSeconds / static_cast<double>(points) - measure.warmupSeconds, 0.3, cap);
  measure.minSeconds = std::min(measure.minSeconds, measure.maxSeconds);
  const bool host = std::all_of(devices.begin(), devices.end(), [](const DeviceSpec& d) { return d.name() == "cpu"; });

  TuneResult result;
  const auto start = Clock::now();
  // Resident trials would each decode the whole dataset again when their Loader starts: decode it
  // once for all of them (streaming trials must keep paying per batch, so they keep the original).
  constexpr std::int64_t kDecodeOnceLimit = 4LL << 30;
  bool decodedOnce = false;
  // Only where the trials would be resident: under `auto` a dataset that advises against it
  // (images: decoded as read, random transforms; token windows) streams when the user runs it, and
  // the tuner measured a decoded copy of it instead (8,000-18,000 samples/s resident against
  // 1,500 streaming, one random draw frozen, and a worker count chosen for the wrong pipeline).
  const Dataset::ResidentAdvice advice = dataset->residentAdvice();
  const bool residentTrials = base.loading_mode == LoadingMode::Resident ||
                              (base.loading_mode == LoadingMode::Auto && !advice.avoid && !advice.refuse);
  if (residentTrials && dataset->hostFields().empty() && dataset->totalBytes() <= kDecodeOnceLimit) {
    dataset = decodeOnce(dataset, std::max(1, static_cast<int>(std::thread::hardware_concurrency())), cancel);
    decodedOnce = true;
    char note[160];
    std::snprintf(note, sizeof note, "decoded the dataset once for every resident trial (%.1f s, outside the budget)",
                  std::chrono::duration<double>(Clock::now() - start).count());
    result.notes.push_back(note);
  }
  // The part knobs change how the dataset is opened: searched on a remote dataset read from the
  // network by every trial, each setting on the dataset opened with it.
  const bool searchParts = spec.remoteDataset && spec.reopen && !decodedOnce && base.cache_dir.empty();
  if (spec.remoteDataset && !searchParts)
    result.notes.push_back(!spec.reopen ? "part_size and max_inflight_parts not searched: the dataset cannot be opened again here"
                           : decodedOnce ? "part_size and max_inflight_parts not searched: resident trials read no byte from the network"
                                         : "part_size and max_inflight_parts not searched: with cache_dir every trial after the first "
                                           "reads the cache (tune them without it)");
  // A trial whose dataset-level knobs differ from the start's reads the dataset opened with them
  // (opened once per setting; the decoded-once dataset stands for every resident trial).
  std::vector<std::pair<LoaderOptions, std::shared_ptr<Dataset>>> opened;  // the options each was opened with
  LoaderOptions current = base;  // the search's setting so far
  auto datasetFor = [&](const LoaderOptions& o) {
    if (!spec.reopen || decodedOnce || !datasetKnobsDiffer(base, o)) return dataset;
    for (const auto& [with, d] : opened)
      if (!datasetKnobsDiffer(with, o)) return d;
    // Only the current setting's is kept besides the new one: each holds its parts' state (a remote
    // WebDataset its kept blocks), and 12 part settings stayed open for the whole search.
    opened.erase(std::remove_if(opened.begin(), opened.end(), [&](const auto& e) { return datasetKnobsDiffer(e.first, current); }),
                 opened.end());
    opened.emplace_back(o, spec.reopen(o));
    return opened.back().second;
  };
  const auto searchStart = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - searchStart).count(); };
  std::map<std::string, std::size_t> seen;  // options JSON -> trial
  auto measureTrial = [&](const LoaderOptions& o) -> TuneTrial {  // a copy: trials grows
    const std::string key = loaderOptionsToJson(o);
    if (auto it = seen.find(key); it != seen.end()) return result.trials[it->second];
    if (cancel) cancel->throwIfCancelled("auto-tune");
    TuneTrial t;
    t.options = o;
    t.change = describeChange(base, o);
    try {
      t.measurement = measureLoader(datasetFor(o), o, devices, session, measure, cancel);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Cancelled) throw;
      t.error = e.what();
    }
    result.trials.push_back(t);
    seen[key] = result.trials.size() - 1;
    if (onTrial) onTrial(result.trials.back(), elapsed());
    return result.trials.back();
  };

  const TuneTrial first = measureTrial(base);
  if (!first.error.empty()) throw Error(ErrorKind::BadInput, "auto-tune", "the starting options fail: " + first.error);
  Measurement currentM = first.measurement;
  result.startMeasurement = currentM;
  try {
    for (bool improved = true; improved && !result.budgetSpent;) {
      improved = false;
      result.passes++;
      for (const auto& [knob, values] : candidates) {
        bool inactive = false;
        for (const auto& k : inactiveKnobs(current, host, searchParts)) inactive = inactive || k.knob == knob;
        if (!searchParts && spec.remoteDataset && (knob == "part_size" || knob == "max_inflight_parts")) inactive = true;
        if (inactive) continue;
        LoaderOptions bestHere = current;
        Measurement bestHereM = currentM;
        for (const std::string& v : values) {
          if (elapsed() >= spec.budgetSeconds) {
            result.budgetSpent = true;
            break;
          }
          nlohmann::json j = nlohmann::json::parse(loaderOptionsToJson(current));
          j[knob] = nlohmann::json::parse(v);
          // More workers need a ring deep enough to keep them busy: at least PyTorch's default of two
          // batches per worker (prefetch alone cannot help while the ring is too shallow for them).
          if (knob == "num_workers" && j[knob].is_number_integer())
            j["prefetch"] = std::max(j["prefetch"].get<int>(), 2 * j[knob].get<int>());
          LoaderOptions o;
          try {
            o = loaderOptionsFromJson(j.dump(), "auto-tune");
          } catch (const Error&) {
            continue;  // a value these options refuse (e.g. prefetch below the workers' need)
          }
          const TuneTrial t = measureTrial(o);
          // Move only to a clearly faster setting: chasing noise wanders. Disjoint intervals alone are
          // not enough: windows of one run are correlated, so the intervals come out narrow (three
          // identical searches each took a different +1 % "win"), and a win must be 3 % or more.
          if (t.error.empty() && t.measurement.samplesPerS > bestHereM.samplesPerS * (1 + kMinGain) &&
              clearlyDifferent(t.measurement, bestHereM)) {
            bestHere = o;
            bestHereM = t.measurement;
          }
        }
        if (loaderOptionsToJson(bestHere) != loaderOptionsToJson(current)) {
          current = bestHere;
          currentM = bestHereM;
          improved = true;
        }
        if (result.budgetSpent) break;
      }
    }
  } catch (const Error& e) {
    // A trial's measurement threw before `current` changed: the search so far stands.
    if (e.kind() != ErrorKind::Cancelled || !spec.keepOnCancel) throw;
    result.cancelled = true;
  }
  result.best = current;
  result.bestMeasurement = currentM;
  result.bestChange = describeChange(base, current);
  result.seconds = elapsed();
  const std::string bestKey = loaderOptionsToJson(current);
  for (const auto& t : result.trials)
    if (t.error.empty() && loaderOptionsToJson(t.options) != bestKey && !clearlyDifferent(t.measurement, currentM))
      result.withinNoise++;
  const double gain = result.startMeasurement.samplesPerS > 0 ? currentM.samplesPerS / result.startMeasurement.samplesPerS - 1 : 0;
  if (result.bestChange.empty())
    result.confidence = "No setting tried was clearly faster than the start.";
  else
    result.confidence = "Clearly faster than the start (" + percentText(gain) + ", 95 % intervals disjoint, each move 3 % or more); " +
                        std::to_string(result.withinNoise) + " other setting" + (result.withinNoise == 1 ? "" : "s") +
                        " tried " + (result.withinNoise == 1 ? "is" : "are") + " within noise of it.";
  if (result.budgetSpent) result.confidence += " The budget ran out before the search settled.";
  if (result.cancelled) result.confidence += " Stopped (cancelled) before the search settled.";
  return result;
}

}  // namespace stoker
