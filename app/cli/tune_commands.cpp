// `stoker tune`: the auto-tuner on the command line (what the workbench's
// Auto-tune button runs). Searches within a time budget, prints each trial
// as it is measured, then the best setting, how sure the choice is, and how
// to use it (--save-options writes it for `stoker bench --options`).
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli_output.h"
#include "cli_progress.h"
#include "commands.h"
#include "data/dataset.h"
#include "data/loader_tune.h"
#include "tune_json.h"
#include "util/busy_work.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"

namespace stoker {
namespace {

struct TuneArgs {
  std::string dataset = "fashion-mnist", device = "cpu", optionsFile, preset, budget = "60s", saveOptions;
  std::int64_t batchSize = kNotGiven64;  // not given: the options'
  double stepMicros = 0, target = 3;
  bool json = false;
};

// "60s", "90", "2m", "1.5min": seconds.
double parseBudget(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : std::string();
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60;
  if (text.empty() || end == text.c_str() || scale == 0 || !(v > 0) || v * scale > 86400)
    throwBadInput("--budget", "must be a time such as 60s, 90 or 2m, up to a day (got \"" + text + "\")");
  return v * scale;
}

void runTune(const TuneArgs& a) {
  if (!a.preset.empty() && !a.optionsFile.empty()) throwBadInput("--preset", "give either --preset or --options, not both");
  LoaderOptions base = !a.preset.empty() ? presetByName(a.preset) : !a.optionsFile.empty() ? loadLoaderOptions(a.optionsFile)
                                                                                         : gpuOptimized();
  if (a.batchSize != kNotGiven64) base.batch_size = a.batchSize;
  validateLoaderOptions(base);
  requireBusyMicros("--step-us", a.stepMicros);
  if (!(a.target > 0 && a.target < 100)) throwBadInput("--target", "must be a percentage between 0 and 100");
  TuneSpec spec;
  spec.budgetSeconds = parseBudget(a.budget);
  spec.measure.targetRelativeCi = a.target / 100;
  LoaderSessionOptions session;
  session.stepMicros = a.stepMicros;
  session.sim.capacityBytes = 16LL << 30;
  CancelToken cancel;
  cancelOnInterrupt(cancel);
  std::shared_ptr<Dataset> dataset;
  {
    OpeningProgress opening(a.json, &cancel);
    dataset = openDataset(a.dataset, base);
  }
  spec.remoteDataset = datasetIsRemote(a.dataset);
  spec.keepOnCancel = true;  // Ctrl-C prints (and saves) the best so far, then exits 130
  spec.reopen = [&a, &cancel](const LoaderOptions& o) {
    // A trial's re-open of a remote WebDataset scans it again: it says so, and Ctrl-C stops it.
    OpeningProgress opening(a.json, &cancel);
    return openDataset(a.dataset, o);
  };
  const auto devices = expandDevices(a.device);
  if (!a.json)
    std::fprintf(stderr, "auto-tune: %s on %s, budget %.0f s, each setting measured to +-%g %%\n",
                 dataset->description().c_str(), a.device.c_str(), spec.budgetSeconds, a.target);
  // The change padded to 44 columns: "→" is one column but three bytes, which printf's width counts.
  auto column = [](const std::string& text) {
    std::size_t width = 0;
    for (unsigned char c : text) width += (c & 0xC0) != 0x80 ? 1 : 0;
    return text + std::string(width < 44 ? 44 - width : 0, ' ');
  };
  const TuneResult r = autoTune(dataset, base, devices, session, spec, &cancel, [&a, &column](const TuneTrial& t, double s) {
    if (a.json) return;
    const std::string change = column(t.change.empty() ? "(start)" : t.change);
    if (!t.error.empty())
      std::fprintf(stderr, "%6.1f s  %s failed: %s\n", s, change.c_str(), t.error.c_str());
    else
      std::fprintf(stderr, "%6.1f s  %s %10.0f samples/s +- %.1f %%\n", s, change.c_str(), t.measurement.samplesPerS,
                   100 * t.measurement.relativeCi());
  });
  if (!a.saveOptions.empty()) saveLoaderOptions(a.saveOptions, r.best);
  if (!a.json)
    for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  if (a.json) {
    const nlohmann::json doc = tuneJson(r, a.dataset, a.device, spec.budgetSeconds);
    printJson(doc);  // a URL's secrets hidden, as in every --json
    if (r.cancelled) throw Error(ErrorKind::Cancelled, "auto-tune", "cancelled");
    return;
  }
  std::printf("best: %s\n", r.bestChange.empty() ? "the starting options" : r.bestChange.c_str());
  std::printf("      %.0f samples/s +- %.0f (95 %%), start %.0f samples/s; %zu settings in %.1f s, %d pass%s\n",
              r.bestMeasurement.samplesPerS, r.bestMeasurement.ciHalfWidth, r.startMeasurement.samplesPerS,
              r.trials.size(), r.seconds, r.passes, r.passes == 1 ? "" : "es");
  std::printf("%s\n", r.confidence.c_str());
  if (!a.saveOptions.empty()) std::printf("saved to %s (stoker bench --options %s)\n", a.saveOptions.c_str(), a.saveOptions.c_str());
  if (r.cancelled) throw Error(ErrorKind::Cancelled, "auto-tune", "cancelled");  // exit 130, as for any Ctrl-C
}

}  // namespace

void addTuneCommands(CLI::App& app, int& /*exitCode*/) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* tune = app.add_subcommand("tune", "search loader settings for the fastest within a time budget");
  tune->add_option("--dataset", args->dataset, kDatasetSpecHelp);
  tune->add_option("--device", args->device, "cpu, sim:N, cuda:N, all, or a list (one loader per device)");
  tune->add_option("--options", args->optionsFile, "start from these LoaderOptions (JSON)");
  tune->add_option("--preset", args->preset, "start from a preset: gpu_optimized (default), distributed_optimized, debug_mode");
  tune->add_option("--batch-size", args->batchSize, "starting batch size");
  tune->add_option("--budget", args->budget, "time to search, e.g. 60s (default), 90, 2m");
  tune->add_option("--target", args->target, "measure each setting to +- this many percent (default 3)");
  tune->add_option("--step-us", args->stepMicros, "simulated training step per batch, in microseconds of busy work");
  tune->add_option("--save-options", args->saveOptions, "write the best LoaderOptions to this JSON file");
  tune->add_flag("--json", args->json, "print the result as JSON");
  tune->callback([args] { runTune(*args); });
}

}  // namespace stoker
