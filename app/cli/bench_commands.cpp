// `stoker bench`: runs the real loader on a dataset and reports throughput;
// `stoker monitor`: prints the telemetry loaders publish.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli_output.h"
#include "cli_progress.h"
#include "commands.h"
#include "data/datasets/dataset_spec.h"
#include "data/datasets/image_dataset.h"
#include "data/loader.h"
#include "data/loader_session.h"
#include "data/pytorch_script.h"
#include "data/multi_device_loader.h"
#include "net/http_transfer.h"
#include "net/remote_url.h"
#include "telemetry/input_bound.h"
#include "telemetry/metrics_http_server.h"
#include "telemetry/prometheus_exporter.h"
#include "telemetry/stage_verdict.h"
#include "telemetry/stragglers.h"
#include "telemetry/telemetry_record.h"
#include "telemetry/telemetry_listener.h"
#include "telemetry/telemetry_publisher.h"
#include "util/busy_work.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/monotonic_seconds.h"
#include "util/progress.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

// Names from the network (telemetry's host, device, mode) as printed: control characters -- a
// terminal's escape sequences, line breaks that would forge rows -- become '?'.
std::string printable(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

struct BenchArgs {
  std::string dataset = "fashion-mnist";
  std::string optionsFile, preset, device = "cpu", mode, saveOptions, weightsFile = "weights.json";
  std::int64_t batchSize = kNotGiven64;  // not given: the options decide
  int epochs = 3, workers = kNotGiven, prefetch = kNotGiven;
  double stepMicros = 0;
  std::string simCapacity = "16GiB", simBandwidth = "12GB";
  std::string transforms;
  bool skipBad = false;
  std::vector<std::string> publish;
  bool json = false, quiet = false, exportPytorch = false, exportPython = false, exportCpp = false, reuse = false;
  // Several devices in one process: the planner's split of every step.
  std::string split = "equal";  // equal, weights or el-che
  std::vector<double> deviceWeights, deviceStepMicros;
  std::int64_t anchorBatches = 4;
  bool splitGiven = false, anchorBatchesGiven = false;  // typed, whatever the value (the default too)
};

LoaderOptions resolveOptions(const BenchArgs& a) {
  LoaderOptions o = !a.preset.empty() ? presetByName(a.preset)
                    : !a.optionsFile.empty() ? loadLoaderOptions(a.optionsFile)
                                             : gpuOptimized();
  if (!a.preset.empty() && !a.optionsFile.empty()) throwBadInput("--preset", "give either --preset or --options, not both");
  if (a.batchSize != kNotGiven64) o.batch_size = a.batchSize;
  if (a.workers != kNotGiven) o.num_workers = a.workers;
  if (a.prefetch != kNotGiven) o.prefetch = a.prefetch;
  // More workers than a preset's ring can keep busy: the ring grows with them (two batches each,
  // as gpu_optimized sizes it), unless --prefetch or the options file sets the depth. A file that
  // set only normalize_on left 15 workers on an H200 behind a ring of 4 (5,000 img/s for 18,000).
  // A file saved by --save-options names prefetch; one written by hand often does not, and then
  // takes the ring from --workers, or from its own num_workers (8 workers behind the default ring
  // of 4 read remote token windows at 50 ms at 2,760-2,900 a second, at 5,483 with a ring of 16).
  else if (const bool file = !a.optionsFile.empty();
           o.num_workers > 0 && (file ? !loaderOptionsFileSets(a.optionsFile, "prefetch") &&
                                            (a.workers > 0 || loaderOptionsFileSets(a.optionsFile, "num_workers"))
                                      : a.workers > 0))
    o.prefetch = std::max(o.prefetch, prefetchForWorkers(o.num_workers));
  if (a.reuse) o.reuse_buffers = true;
  if (!a.transforms.empty()) o.transforms = a.transforms;
  if (a.skipBad) o.skip_bad_samples = true;
  if (!a.mode.empty()) o.loading_mode = a.mode == "resident" ? LoadingMode::Resident
                                        : a.mode == "streaming" ? LoadingMode::Streaming
                                                                : LoadingMode::Auto;
  validateLoaderOptions(o);
  return o;
}

nlohmann::json memoryJson(const DeviceMemory& m) {
  return {{"total", m.total}, {"used", m.used}, {"free", m.free}, {"reserved", m.reserved}, {"allocated", m.allocated}};
}

// Several devices fed by one MultiDeviceLoader: each step's batches are
// "trained" on every device at once (busy work of that device's step time
// per batch, so sim devices can be unequal GPUs) and El Che learns from the
// measured times.
// `raiseWorkers`: set when nobody chose the workers (Loader::raiseWorkersForNetwork's argument).
void runMultiDeviceBench(const BenchArgs& a, LoaderOptions options, const std::shared_ptr<Dataset>& dataset,
                         const std::vector<DeviceSpec>& devices, const SimDeviceConfig& sim,
                         const std::shared_ptr<TelemetryPublisher>& publisher, CancelToken& cancel,
                         std::optional<int> raiseWorkers) {
  const auto n = devices.size();
  if (!a.deviceStepMicros.empty() && a.deviceStepMicros.size() != n)
    throwBadInput("--device-step-us", "has " + std::to_string(a.deviceStepMicros.size()) + " entries for " +
                                          std::to_string(n) + " devices");
  MultiDeviceOptions m;
  m.elChe = a.split == "el-che";
  m.anchorBatches = a.anchorBatches;
  if (a.split == "weights") {
    if (a.deviceWeights.empty()) throwBadInput("--split weights", "needs --device-weights w0,w1,...");
    m.weights = a.deviceWeights;
  } else if (!a.deviceWeights.empty()) {
    throwBadInput("--device-weights", "only with --split weights");
  }
  std::vector<std::shared_ptr<DeviceBackend>> backends;
  for (const auto& d : devices) backends.push_back(DeviceBackend::create(d, sim));
  MultiDeviceLoader loader(dataset, options, backends, m);
  for (int d = 0; d < loader.devices(); ++d) {
    loader.loader(d).setCancelToken(&cancel);
    if (publisher) loader.loader(d).addObserver(publisher);
    // Each device's loader reads its own share of the windows, a round trip a batch: each gets the
    // workers one device would (their batches are the same size, or near it under El Che).
    if (raiseWorkers && loader.loader(d).raiseWorkersForNetwork(*raiseWorkers)) {
      options.num_workers = loader.loader(d).options().num_workers;
      options.prefetch = loader.loader(d).options().prefetch;
    }
  }
  if (!a.saveOptions.empty()) saveLoaderOptions(a.saveOptions, options);
  if (!a.json && !a.quiet)
    for (const auto& note : loader.notes()) std::fprintf(stderr, "%s\n", redactedUrl(note).c_str());
  // El Che balances the steps' times; a bench without a step has none to balance, and its counts
  // would follow the timer's noise (one device given thousands of batches a round). Said even with
  // --json (on stderr), since the figures are then meaningless.
  const bool noStep = a.stepMicros <= 0 && std::all_of(a.deviceStepMicros.begin(), a.deviceStepMicros.end(),
                                                       [](double us) { return us <= 0; });
  if (m.elChe && noStep && !a.quiet)
    std::fprintf(stderr, "warning: --split el-che balances the devices' step times, and this bench has no step: give "
                         "--step-us U or --device-step-us u0,u1,... (the counts follow timer noise without one)\n");
  std::vector<std::int64_t> samples(n, 0), batches(n, 0);
  double steadySeconds = 0;
  std::int64_t steadySamples = 0, steps = 0;
  for (int e = 0; e < a.epochs; ++e) {
    const auto start = std::chrono::steady_clock::now();
    std::int64_t epochSamples = 0;
    // Every epoch but the last makes the next one's first steps before it ends.
    auto epoch = loader.epoch(e, e + 1 < a.epochs ? Loader::Lookahead::NextEpoch : Loader::Lookahead::Off);
    while (auto step = epoch.next()) {
      cancel.throwIfCancelled("bench");
      std::vector<double> ms(n, 0);
      std::atomic<std::size_t> next{0};
      runJobs(static_cast<int>(n), [&] {
        for (std::size_t d; (d = next.fetch_add(1)) < n;) {
          const auto t0 = std::chrono::steady_clock::now();
          const double us = a.deviceStepMicros.empty() ? a.stepMicros : a.deviceStepMicros[d];
          busyWork(us * static_cast<double>(step->perDevice[d].size()));
          ms[d] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
      });
      for (std::size_t d = 0; d < n; ++d) {
        const auto count = static_cast<std::int64_t>(step->perDevice[d].size());
        loader.recordStepTime(static_cast<int>(d), ms[d], count);
        batches[d] += count;
        for (const auto& b : step->perDevice[d]) samples[d] += b.size(), epochSamples += b.size();
      }
      ++steps;
    }
    if (e > 0 || a.epochs == 1) {
      steadySeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      steadySamples += epochSamples;
    }
  }
  if (publisher) publisher->flush(500);
  const double rate = steadySeconds > 0 ? static_cast<double>(steadySamples) / steadySeconds : 0;
  const auto shares = loader.stepShares();
  nlohmann::json perDevice = nlohmann::json::array();
  for (std::size_t d = 0; d < n; ++d)
    perDevice.push_back({{"device", devices[d].name()},
                         {"mode", loadingModeName(loader.loader(static_cast<int>(d)).mode())},
                         {"samples", samples[d]},
                         {"batches", batches[d]},
                         {"step_share", shares[d]},
                         {"memory", memoryJson(loader.loader(static_cast<int>(d)).memory())}});
  if (a.json) {
    printJson({{"dataset", a.dataset},  // printJson hides a URL's secrets
               {"samples", dataset->size()},
               {"batch_size", options.batch_size},
               {"epochs", a.epochs},
               {"split", a.split},
               {"steps", steps},
               {"gather_device", devices[static_cast<std::size_t>(loader.gatherDevice())].name()},
               {"mode", loadingModeName(loader.loader(0).mode())},
               {"samples_per_s", rate},
               {"bytes_per_s", rate * static_cast<double>(dataset->sampleBytes())},
               {"per_device", perDevice},
               {"notes", loader.notes()},
               {"options", nlohmann::json::parse(loaderOptionsToJson(options))}});
    return;
  }
  std::printf("%s: %lld samples, batch %lld per device, %zu devices, split %s, %d epochs\n",
              dataset->description().c_str(), static_cast<long long>(dataset->size()),
              static_cast<long long>(options.batch_size), n, a.split.c_str(), a.epochs);
  std::printf("%-8s %-9s %12s %9s %11s\n", "device", "mode", "samples", "batches", "step share");
  for (std::size_t d = 0; d < n; ++d)
    std::printf("%-8s %-9s %12lld %9lld %11lld\n", devices[d].name().c_str(),
                loadingModeName(loader.loader(static_cast<int>(d)).mode()).c_str(), static_cast<long long>(samples[d]),
                static_cast<long long>(batches[d]), static_cast<long long>(shares[d]));
  std::printf("steady state (epochs after the first): %.0f samples/s\n", rate);
}

// Worker milliseconds per batch by stage over the steady-state epochs (all epochs when there is one).
std::map<std::string, double> steadyStagesMs(const std::vector<EpochSummary>& epochs) {
  std::map<std::string, double> seconds;
  std::int64_t batches = 0;
  for (std::size_t i = epochs.size() > 1 ? 1 : 0; i < epochs.size(); ++i) {
    if (epochs[i].stageSeconds.empty()) continue;
    for (const auto& [stage, t] : epochs[i].stageSeconds) seconds[stage] += t;
    batches += epochs[i].batches;
  }
  for (auto& [stage, t] : seconds) t = batches > 0 ? 1e3 * t / static_cast<double>(batches) : 0;
  return seconds;
}

nlohmann::json stagesJson(const EpochSummary& e) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [stage, t] : e.stageSeconds) j[stage] = e.batches > 0 ? 1e3 * t / static_cast<double>(e.batches) : 0.0;
  return j;
}

// Uncached remote token or Megatron windows, told from the spec alone (an export opens nothing):
// the datasets whose batches wait on the network (Dataset::batchWaitsOnNetwork) when streamed.
bool specWaitsOnNetwork(const std::string& spec, const LoaderOptions& o) {
  const std::size_t colon = spec.find(':');
  if (colon == std::string::npos || !o.cache_dir.empty() || o.loading_mode == LoadingMode::Resident) return false;
  const std::string kind = spec.substr(0, colon), rest = spec.substr(colon + 1);
  return (kind == "tokens" || kind == "megatron") && isRemotePath(rest.substr(0, DatasetSpec::pathEnd(rest)));
}

void runBench(const BenchArgs& a) {
  if (a.epochs < 1) throwBadInput("--epochs", "must be at least 1 (got " + std::to_string(a.epochs) + ")");
  requireBusyMicros("--step-us", a.stepMicros);
  for (double us : a.deviceStepMicros) requireBusyMicros("--device-step-us", us);
  LoaderOptions options = resolveOptions(a);
  const bool exporting = a.exportPytorch || a.exportPython || a.exportCpp;
  // Workers nobody chose (no --workers, no preset, not in the options file): uncached remote token
  // windows get enough to keep the network busy, the ring two batches each unless its depth was chosen.
  const auto fileSets = [&](const char* knob) { return !a.optionsFile.empty() && loaderOptionsFileSets(a.optionsFile, knob); };
  std::optional<int> raiseWorkers;
  if (a.workers == kNotGiven && a.preset.empty() && !fileSets("num_workers"))
    raiseWorkers = a.prefetch != kNotGiven || fileSets("prefetch") ? 0 : 2;
  if (exporting) {
    // --save-options: an export saves what it prints; a run, once its loaders are open (they may
    // raise workers nobody chose).
    if (!a.saveOptions.empty()) saveLoaderOptions(a.saveOptions, options);
    // The snippets load a weighted sampler's weights from a file: write it.
    if (options.sampler_type == SamplerType::Weighted) {
      saveWeightsFile(a.weightsFile, options.weights);
      std::fprintf(stderr, "wrote %zu weights to %s (the snippet loads them)\n", options.weights.size(),
                   a.weightsFile.c_str());
    }
    const std::string device = a.device.find(',') == std::string::npos && a.device != "all" ? a.device : "cuda:0";
    if (a.exportPytorch) std::printf("%s", exportPyTorchScript(options, a.dataset, device, a.weightsFile).c_str());
    if (a.exportPython) {
      // An export opens no dataset, so it cannot raise workers nobody chose: for uncached remote
      // token windows it leaves them (and the ring) to stoker.Loader, which raises them when it opens.
      LoaderOptions snippet = options;
      if (raiseWorkers && specWaitsOnNetwork(a.dataset, options)) {
        snippet.num_workers = LoaderOptions{}.num_workers;
        if (*raiseWorkers != 0) snippet.prefetch = LoaderOptions{}.prefetch;
        std::fprintf(stderr, "num_workers is left to stoker.Loader: it gives uncached remote token windows up to %d "
                             "workers (give --workers to pin a number)\n", kWorkersForNetwork);
      }
      std::printf("%s", exportStokerSnippet(snippet, a.dataset, device, a.weightsFile).c_str());
    }
    if (a.exportCpp) std::printf("%s", exportCppSnippet(options, device, a.weightsFile).c_str());
    return;
  }

  SimDeviceConfig sim;
  sim.capacityBytes = static_cast<std::int64_t>(parseByteSize(a.simCapacity, "--sim-capacity"));
  sim.copyBytesPerSecond = static_cast<double>(parseByteSize(a.simBandwidth, "--sim-bandwidth"));
  refuseTransformsUnlessImages(a.dataset, a.transforms, "--transforms");
  // Timed from here, not from the process's start: loading libtorch (~0.35 s on the 2-core VM) is
  // what a Python peer's imports are, and its figures leave those out too.
  CancelToken cancel;
  cancelOnInterrupt(cancel);
  const double openStart = monotonicSeconds();
  std::shared_ptr<Dataset> dataset;
  {
    OpeningProgress opening(a.quiet || a.json, &cancel);
    dataset = openDataset(a.dataset, options);
  }
  const double openSeconds = monotonicSeconds() - openStart;
  const auto devices = expandDevices(a.device);
  std::shared_ptr<TelemetryPublisher> publisher;
  if (!a.publish.empty()) {
    publisher = std::make_shared<TelemetryPublisher>(a.publish);
    // Ports picked by the system (listen:0, prometheus:0) are only known now: say them.
    for (std::size_t i = 0; i < a.publish.size(); ++i)
      if (const int port = publisher->listeningPort(i))
        std::fprintf(stderr, "telemetry: %s on port %d%s\n", a.publish[i].c_str(), port,
                     a.publish[i].rfind("prometheus:", 0) == 0 ? " (/metrics)" : "");
  }

  if (devices.size() > 1) {
    runMultiDeviceBench(a, options, dataset, devices, sim, publisher, cancel, raiseWorkers);
    return;
  }
  // The split of a step over several devices means nothing on one: say so rather than run without it.
  // Typed, not only other than the default: `--anchor-batches 4` with one device was taken silently.
  if (a.splitGiven || !a.deviceWeights.empty() || !a.deviceStepMicros.empty() || a.anchorBatchesGiven)
    throwBadInput(a.splitGiven                     ? "--split " + a.split
                  : !a.deviceWeights.empty()       ? std::string("--device-weights")
                  : !a.deviceStepMicros.empty()    ? std::string("--device-step-us")
                                                   : std::string("--anchor-batches"),
                  "splits a step over several devices; --device " + a.device + " is one (use --step-us for its step)");
  LoaderSessionOptions session;
  session.epochs = a.epochs;
  session.stepMicros = a.stepMicros;
  session.sim = sim;
  if (publisher) session.observers.push_back(publisher);
  session.openCancel = &cancel;  // Ctrl-C while a resident dataset decodes
  session.raiseWorkersForNetwork = raiseWorkers;
  LoaderSession run(dataset, options, devices, session);
  options = run.options();
  if (!a.saveOptions.empty()) saveLoaderOptions(a.saveOptions, options);
  if (!a.json && !a.quiet)
    for (const auto& n : run.notes()) std::fprintf(stderr, "%s\n", redactedUrl(n).c_str());  // a note may name a shard's URL
  TerminalProgress terminal("bench", a.quiet || a.json);
  const LoaderSessionResult result = run.run(&terminal, &cancel);
  const double runSeconds = monotonicSeconds() - openStart;  // the open, then every epoch
  if (publisher) publisher->flush(500);

  const double samplesPerS = result.samplesPerS, bytesPerS = result.bytesPerS;
  nlohmann::json perDevice = nlohmann::json::array();
  for (const auto& r : result.devices) {
    nlohmann::json epochs = nlohmann::json::array();
    for (const auto& e : r.epochs)
      epochs.push_back({{"epoch", e.epoch},
                        {"seconds", e.seconds},
                        {"batches", e.batches},
                        {"samples", e.samples},
                        {"bytes", e.bytes},
                        {"samples_per_s", e.seconds > 0 ? static_cast<double>(e.samples) / e.seconds : 0},
                        {"data_wait_s", e.waitSeconds},
                        {"prefetch_depth", e.depth},
                        {"stages_ms", stagesJson(e)},
                        {"skipped", e.skipped}});
    const auto stages = steadyStagesMs(r.epochs);
    nlohmann::json verdict = nullptr;
    if (!stages.empty()) verdict = stageVerdict(stages).text;
    perDevice.push_back({{"device", r.device},
                         {"stages_ms", stages},
                         {"stage_verdict", verdict},
                         {"mode", loadingModeName(r.mode)},
                         {"samples_per_s", r.samplesPerS},
                         {"bytes_per_s", r.bytesPerS},
                         {"prefetch_depth", r.prefetchDepth},
                         {"memory", memoryJson(r.memory)},
                         {"notes", r.notes},
                         {"epochs", epochs}});
  }
  // Image datasets: what their JPEG scan indexes hold in memory after the run.
  const auto images = std::dynamic_pointer_cast<const EncodedImageDataset>(dataset);
  // A remote dataset: what the open and the epochs asked the network for (requests a batch show
  // whether a batch's windows went as one request or one each).
  nlohmann::json network = nullptr;
  if (datasetIsRemote(a.dataset)) {
    std::int64_t batches = 0;
    for (const auto& r : result.devices)
      for (const auto& e : r.epochs) batches += e.batches;
    const NetCounters& net = netCounters();
    const auto requests = net.requests.load();
    network = {{"requests", requests},
               {"bytes", net.bytes.load()},
               {"retries", net.retries.load()},
               {"requests_per_batch", batches > 0 ? static_cast<double>(requests) / static_cast<double>(batches) : 0.0}};
  }
  if (a.json) {
    nlohmann::json doc = {{"dataset", a.dataset},  // printed by printJson, which hides a URL's secrets
                          {"dataset_description", dataset->description()},
                          {"samples", dataset->size()},
                          {"sample_bytes", dataset->sampleBytes()},
                          {"batch_size", options.batch_size},
                          {"epochs", a.epochs},
                          {"mode", loadingModeName(result.devices[0].mode)},
                          {"samples_per_s", samplesPerS},
                          {"bytes_per_s", bytesPerS},
                          {"open_seconds", openSeconds},
                          {"run_seconds", runSeconds},
                          {"per_device", perDevice},
                          {"options", nlohmann::json::parse(loaderOptionsToJson(options))}};
    if (publisher) doc["telemetry"] = {{"sent", publisher->sent()}, {"dropped", publisher->dropped()}};
    if (images) doc["jpeg_scan_index"] = {{"bytes", images->scanIndexBytes()}, {"budget", images->scanIndexBudget()}};
    if (!network.is_null()) doc["network"] = network;
    printJson(doc);
    return;
  }
  std::printf("%s: %lld samples of %s, batch %lld, %d workers, %d epochs\n", dataset->description().c_str(),
              static_cast<long long>(dataset->size()), humanBytes(static_cast<std::uint64_t>(dataset->sampleBytes())).c_str(),
              static_cast<long long>(options.batch_size), options.num_workers, a.epochs);
  std::printf("%-8s %-9s %5s %6s %9s %14s %12s %7s\n", "device", "mode", "epoch", "depth", "seconds", "samples/s", "bytes/s",
              "wait");
  for (const auto& r : result.devices)
    for (const auto& e : r.epochs)
      std::printf("%-8s %-9s %5lld %6d %9.3f %14.0f %10s/s %6.1f%%\n", r.device.c_str(), loadingModeName(e.mode).c_str(),
                  static_cast<long long>(e.epoch), e.depth, e.seconds,
                  e.seconds > 0 ? static_cast<double>(e.samples) / e.seconds : 0.0,
                  humanBytes(static_cast<std::uint64_t>(e.seconds > 0 ? static_cast<double>(e.bytes) / e.seconds : 0)).c_str(),
                  e.seconds > 0 ? 100.0 * e.waitSeconds / e.seconds : 0.0);
  std::printf("steady state (epochs after the first): %.0f samples/s, %s/s\n", samplesPerS,
              humanBytes(static_cast<std::uint64_t>(bytesPerS)).c_str());
  std::printf("opened in %.3f s; open and every epoch: %.3f s\n", openSeconds, runSeconds);
  // Where the workers' time goes, per batch, and the consumer's wait beside it.
  for (const auto& r : result.devices) {
    const auto stages = steadyStagesMs(r.epochs);
    if (stages.empty()) continue;
    double waitMs = 0;
    std::int64_t batches = 0;
    for (std::size_t i = r.epochs.size() > 1 ? 1 : 0; i < r.epochs.size(); ++i) {
      waitMs += 1e3 * r.epochs[i].waitSeconds;
      batches += r.epochs[i].batches;
    }
    std::printf("%s stages, ms per batch (worker time):", r.device.c_str());
    for (const char* stage : kTelemetryStages)
      if (stages.count(stage)) std::printf(" %s %.2f", stage, stages.at(stage));
    std::printf(" | consumer's data wait %.2f\n", batches > 0 ? waitMs / static_cast<double>(batches) : 0.0);
    std::printf("%s: %s\n", r.device.c_str(), stageVerdict(stages).text.c_str());
  }
  for (const auto& r : result.devices) {
    std::int64_t skipped = 0;
    std::string first;
    for (const auto& e : r.epochs) {
      if (e.skipped > 0 && first.empty()) first = e.firstSkipped;
      skipped += e.skipped;
    }
    if (skipped > 0)
      std::printf("%s: skipped %lld bad samples (skip_bad_samples); the first: %s\n", r.device.c_str(),
                  static_cast<long long>(skipped), first.c_str());
  }
  if (images)
    std::printf("JPEG scan index: %s of its %s budget (STOKER_JPEG_SCAN_INDEX_MB)\n",
                humanBytes(images->scanIndexBytes()).c_str(), humanBytes(images->scanIndexBudget()).c_str());
  if (publisher)
    std::printf("telemetry: %lld records sent, %lld dropped\n", static_cast<long long>(publisher->sent()),
                static_cast<long long>(publisher->dropped()));
  if (!network.is_null())
    std::printf("network: %llu requests (%.1f a batch), %s received, %llu retries\n",
                static_cast<unsigned long long>(network["requests"].get<std::uint64_t>()), network["requests_per_batch"].get<double>(),
                humanBytes(network["bytes"].get<std::uint64_t>()).c_str(), static_cast<unsigned long long>(network["retries"].get<std::uint64_t>()));
}

struct MonitorArgs {
  std::string address;
  std::vector<std::string> connect;
  std::string prometheus;
  bool json = false;
  double duration = 0;
};

// The latest record of each (host, pid, rank, device, loader): what the closing summary and the
// straggler check read.
using SeriesKey = std::tuple<std::string, std::int64_t, int, std::string, std::string>;
// Series tracked at most for the summary: a peer inventing names cannot grow the maps past it.
constexpr std::size_t kMaxSeries = 10000;

void printMonitorSummary(const std::map<SeriesKey, TelemetryRecord>& latest, const std::map<SeriesKey, std::int64_t>& counts,
                         bool json) {
  std::vector<const TelemetryRecord*> series;
  for (const auto& [key, r] : latest) series.push_back(&r);
  const auto stragglers = findStragglers(liveRankTimings(series));
  if (json) {
    nlohmann::json doc = nlohmann::json::object();
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& [key, r] : latest) {
      const double share = dataWaitShare(r.data_wait_ms, r.step_ms);
      nlohmann::json row = {{"host", r.host}, {"pid", r.pid}, {"rank", r.rank}, {"device", r.device},
                            {"records", counts.at(key)}, {"epoch", r.epoch}, {"step", r.step},
                            {"samples_per_s", r.samples_per_s}, {"data_wait_ms", r.data_wait_ms},
                            {"step_ms", r.step_ms}, {"verdict", inputBoundName(classifyInputBound(share))}};
      row["data_wait_share"] = share >= 0 ? nlohmann::json(share) : nlohmann::json(nullptr);
      if (!r.loader.empty()) row["loader"] = r.loader;
      if (!r.source.empty()) row["source"] = r.source;
      ranks.push_back(row);
    }
    nlohmann::json named = nlohmann::json::array();
    for (const auto& st : stragglers)
      named.push_back({{"rank", st.rank}, {"device", st.device}, {"metric", st.metric}, {"value_ms", st.value_ms},
                       {"median_ms", st.median_ms}, {"text", describeStraggler(st)}});
    doc["summary"] = {{"ranks", ranks}, {"stragglers", named}};
    std::printf("%s\n", doc.dump().c_str());
    return;
  }
  if (latest.empty()) return;
  std::printf("\nsummary: %zu series\n", latest.size());
  for (const auto& [key, r] : latest)
    std::printf("  rank %d %-8s %-22s %s, data wait %.2f ms, step %.2f ms, %lld records\n", r.rank, printable(r.device).c_str(),
                (printable(r.host) + ":" + std::to_string(r.pid)).c_str(),
                inputBoundName(classifyInputBound(dataWaitShare(r.data_wait_ms, r.step_ms))).c_str(), r.data_wait_ms,
                r.step_ms, static_cast<long long>(counts.at(key)));
  if (stragglers.empty()) std::printf("no straggler\n");
  for (const auto& st : stragglers) std::printf("straggler: %s\n", printable(describeStraggler(st)).c_str());
}

void runMonitor(const MonitorArgs& a) {
  if (a.duration < 0) throwBadInput("--duration", "must be non-negative");
  if (a.address.empty() && a.connect.empty()) throwBadInput("monitor", "give an ADDRESS to listen on, or --connect HOST:PORT");
  TelemetryListener listener(a.address);
  for (const auto& c : a.connect) listener.dial(c);
  std::unique_ptr<PrometheusExporter> exporter;
  std::unique_ptr<MetricsHttpServer> server;
  if (!a.prometheus.empty()) {
    exporter = std::make_unique<PrometheusExporter>();
    server = std::make_unique<MetricsHttpServer>(a.prometheus, [e = exporter.get()] { return e->render(); });
  }
  CancelToken cancel;
  cancelOnInterrupt(cancel);
  if (!a.address.empty()) std::fprintf(stderr, "listening on port %d\n", listener.port());
  for (const auto& c : a.connect) std::fprintf(stderr, "dialling %s\n", c.c_str());
  if (server) std::fprintf(stderr, "Prometheus metrics on port %d at /metrics\n", server->port());
  if (a.duration <= 0) std::fprintf(stderr, "Ctrl-C to stop\n");
  if (!a.json)
    std::printf("%-20s %4s %-7s %5s %11s %12s %10s %8s %8s %5s %5s %-9s %s\n", "source", "rank", "device", "epoch", "step",
                "samples/s", "bytes/s", "wait ms", "step ms", "depth", "ready", "mode", "memory used/total");
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  std::int64_t records = 0;
  std::map<SeriesKey, TelemetryRecord> latest;
  std::map<SeriesKey, std::int64_t> counts;
  while (!cancel.cancelled()) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (a.duration > 0 && elapsed >= a.duration) break;
    for (const auto& r : listener.poll(100)) {
      ++records;
      const SeriesKey key{r.host, r.pid, r.rank, r.device, r.loader};
      if (latest.size() < kMaxSeries || latest.count(key)) {
        latest[key] = r;
        ++counts[key];
      }
      if (exporter) exporter->onRecord(r);
      if (a.json) {
        std::printf("%s\n", telemetryToJson(r).c_str());
      } else {
        // Figures the publisher did not know print as "—" (the Python probe has no worker timings).
        const auto count = [](auto v) { return isKnown(v) ? std::to_string(v) : std::string("—"); };
        const auto bytes = [](auto v) { return isKnown(v) ? humanBytes(static_cast<std::uint64_t>(v)) : std::string("—"); };  // parsed values are within [0, 1e18]
        const std::string source = printable(r.host) + ":" + std::to_string(r.pid);
        const std::string step = std::to_string(r.step) + "/" + std::to_string(r.steps_total);
        std::printf("%-20.20s %4d %-7s %5lld %11s %12.0f %8s/s %8.2f %8.2f %5s %5s %-9s %s / %s%s\n", source.c_str(),
                    r.rank, printable(r.device).c_str(), static_cast<long long>(r.epoch), step.c_str(), r.samples_per_s,
                    bytes(r.bytes_per_s).c_str(), r.data_wait_ms, r.step_ms, count(r.prefetch_depth).c_str(),
                    count(r.ready).c_str(), printable(r.mode).c_str(), bytes(r.mem_used).c_str(), bytes(r.mem_total).c_str(),
                    r.epoch_end ? "  (epoch end)" : "");
      }
    }
    std::fflush(stdout);
  }
  printMonitorSummary(latest, counts, a.json);
  std::fflush(stdout);
  std::fprintf(stderr, "%lld records from %d open connections; %lld unreadable lines\n", static_cast<long long>(records),
               listener.connections(), static_cast<long long>(listener.badLines()));
}

}  // namespace

void addBenchCommands(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand("bench", "Run the loader on a dataset and report its throughput");
  bench->add_option("--dataset", args->dataset, kDatasetSpecHelp);
  bench->add_option("--options", args->optionsFile, "LoaderOptions JSON file (knob names as keys)");
  bench->add_option("--preset", args->preset, "gpu_optimized (default), distributed_optimized or debug_mode");
  bench->add_option("--batch-size", args->batchSize, "samples per batch");
  bench->add_option("--epochs", args->epochs, "epochs to run (default 3; steady state = epochs after the first)");
  bench->add_option("--device", args->device, "cpu, sim:N, cuda:N, all, or a list (sim:0,sim:1): one loader per device");
  bench->add_option("--mode", args->mode, "auto, resident or streaming")->check(CLI::IsMember({"auto", "resident", "streaming"}));
  bench->add_option("--workers", args->workers,
                    "worker threads (0 = on the consumer's thread; default: --preset's or --options', else cores - 1, "
                    "or 16 a device for uncached remote token windows)");
  bench->add_option("--prefetch", args->prefetch, "most batches ahead of the consumer");
  bench->add_flag("--reuse-buffers", args->reuse, "batches share output buffers (valid until the next batch)");
  bench->add_option("--transforms", args->transforms,
                    "image datasets: torchvision-named transforms, e.g. \"RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)\"");
  bench->add_flag("--skip-bad-samples", args->skipBad, "skip and count undecodable samples instead of stopping");
  bench->add_option("--step-us", args->stepMicros, "simulated training step per batch, in microseconds of busy work");
  bench->add_option("--sim-capacity", args->simCapacity, "memory of simulated devices (default 16GiB)");
  bench->add_option("--sim-bandwidth", args->simBandwidth, "copy bandwidth of simulated devices per second (default 12GB)");
  bench->add_option("--publish", args->publish,
                    "send telemetry to HOST:PORT (stoker monitor), file:PATH, listen:PORT (the monitor dials in) or "
                    "prometheus:PORT (serve /metrics); repeatable");
  bench->add_option("--save-options", args->saveOptions,
                    "write the resolved LoaderOptions to this JSON file (a run's once its loader is open: with the "
                    "workers it raised)");
  bench->add_flag("--export-pytorch", args->exportPytorch, "print the equivalent PyTorch DataLoader(...) and exit");
  bench->add_flag("--export-python", args->exportPython,
                  "print the same loader for a PyTorch training script, stoker.Loader(...) (import stoker), and exit");
  bench->add_flag("--export-cpp", args->exportCpp, "print the C++ builder for these options and exit");
  bench->add_option("--weights-file", args->weightsFile,
                    "exports with a weighted sampler: write its weights here for the snippet to load (default weights.json)");
  auto* splitOption = bench->add_option("--split", args->split, "several devices: equal, weights or el-che (default equal)")
                          ->check(CLI::IsMember({"equal", "weights", "el-che"}));
  bench->add_option("--device-weights", args->deviceWeights, "--split weights: per-device shares (w0,w1,...)")
      ->delimiter(',');
  bench->add_option("--device-step-us", args->deviceStepMicros,
                    "per-device simulated step per batch, microseconds (unequal GPUs; u0,u1,...)")
      ->delimiter(',');
  auto* anchorOption =
      bench->add_option("--anchor-batches", args->anchorBatches, "--split el-che: batches of the slowest device per step");
  bench->add_flag("--quiet", args->quiet, "no progress line");
  bench->add_flag("--json", args->json, "print one JSON document");
  bench->callback([args, splitOption, anchorOption, &exitCode] {
    args->splitGiven = splitOption->count() > 0;
    args->anchorBatchesGiven = anchorOption->count() > 0;
    runBench(*args);
    exitCode = 0;
  });

  auto margs = std::make_shared<MonitorArgs>();
  auto* monitor = app.add_subcommand("monitor", "Listen for loader telemetry and print it as it arrives");
  monitor->add_option("ADDRESS", margs->address, "HOST:PORT or :PORT to listen on");
  monitor->add_option("--connect", margs->connect,
                      "also dial a publisher listening at HOST:PORT (--publish listen:PORT); repeatable");
  monitor->add_option("--prometheus", margs->prometheus, "serve what arrives as Prometheus metrics on [HOST]:PORT/metrics");
  monitor->add_flag("--json", margs->json,
                    "print each record as one JSON line, and at the end one line {\"summary\": {ranks, stragglers}}");
  monitor->add_option("--duration", margs->duration, "stop after this many seconds (default: until Ctrl-C)");
  monitor->callback([margs, &exitCode] {
    runMonitor(*margs);
    exitCode = 0;
  });
}

}  // namespace stoker
