// stoker_tune_bench: the auto-tuner against the full grid, in one run.
//
//   stoker_tune_bench [DATASET] [SHARE]
//
// Measures every point of a grid (num_workers x prefetch x batch_size x
// reuse_buffers, 100 points) the way sweeps do -- warm-up, then to +-3 % or
// 5 s -- with no time limit, then runs the auto-tuner over the same values
// with a budget of SHARE (default 0.25) of the grid's time, and reports the
// tuner's best as a share of the grid's best. The goal: >= 95 % of the
// grid's best in <= 25 % of its time. A program to run and report, never a
// timed assertion in the test suite.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/loader_tune.h"

using namespace stoker;

int main(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "synthetic:1000000,3x32x32,u8,30,150";
  const double share = argc > 2 ? std::atof(argv[2]) : 0.25;
  auto dataset = openDataset(spec);
  const std::vector<std::pair<std::string, std::vector<std::string>>> candidates = {
      {"num_workers", {"0", "1", "2", "4", "8"}},
      {"prefetch", {"1", "2", "4", "8", "16"}},
      {"batch_size", {"32", "128"}},
      {"reuse_buffers", {"false", "true"}}};
  LoaderOptions base = LoaderOptions::builder().batchSize(32).numWorkers(0).prefetch(1)
                           .loadingMode(LoadingMode::Streaming).build();
  const std::vector<DeviceSpec> devices{DeviceSpec::parse("cpu")};
  LoaderSessionOptions session;
  MeasureSpec measure;  // the sweep's: +-3 %, at most 5 s per point

  std::fprintf(stderr, "dataset: %s\ngrid: 100 points, each to +-3 %% or 5 s\n", dataset->description().c_str());
  const auto gridStart = std::chrono::steady_clock::now();
  double gridBest = 0;
  std::string gridBestText;
  int points = 0;
  for (const auto& w : candidates[0].second)
    for (const auto& p : candidates[1].second)
      for (const auto& b : candidates[2].second)
        for (const auto& r : candidates[3].second) {
          nlohmann::json j = nlohmann::json::parse(loaderOptionsToJson(base));
          j["num_workers"] = std::stoi(w);
          j["prefetch"] = std::stoi(p);
          j["batch_size"] = std::stoi(b);
          j["reuse_buffers"] = r == "true";
          const LoaderOptions o = loaderOptionsFromJson(j.dump());
          const Measurement m = measureLoader(dataset, o, devices, session, measure, nullptr);
          ++points;
          const std::string text = "num_workers " + w + ", prefetch " + p + ", batch_size " + b + ", reuse_buffers " + r;
          std::fprintf(stderr, "  %3d  %-62s %9.0f samples/s +- %.1f %%\n", points, text.c_str(), m.samplesPerS,
                       100 * m.relativeCi());
          if (m.samplesPerS > gridBest) gridBest = m.samplesPerS, gridBestText = text;
        }
  const double gridSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - gridStart).count();

  TuneSpec tune;
  tune.budgetSeconds = share * gridSeconds;
  tune.candidates = candidates;
  const TuneResult t = autoTune(dataset, base, devices, session, tune, nullptr, [](const TuneTrial& trial, double s) {
    std::fprintf(stderr, "  tune %6.1f s  %-60s %9.0f samples/s\n", s, trial.change.c_str(), trial.measurement.samplesPerS);
  });
  // The tuner's best, measured again like a grid point so the two figures compare.
  const Measurement again = measureLoader(dataset, t.best, devices, session, measure, nullptr);
  const nlohmann::json report = {{"dataset", spec},
                                 {"grid_points", points},
                                 {"grid_seconds", gridSeconds},
                                 {"grid_best", gridBestText},
                                 {"grid_best_samples_per_s", gridBest},
                                 {"tune_budget_s", tune.budgetSeconds},
                                 {"tune_seconds", t.seconds},
                                 {"tune_trials", t.trials.size()},
                                 {"tune_best", t.bestChange},
                                 {"tune_best_samples_per_s", t.bestMeasurement.samplesPerS},
                                 {"tune_best_remeasured", again.samplesPerS},
                                 {"share_of_grid_best", gridBest > 0 ? again.samplesPerS / gridBest : 0},
                                 {"share_of_grid_time", gridSeconds > 0 ? t.seconds / gridSeconds : 0},
                                 {"confidence", t.confidence}};
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
