// `stoker feed`: one rank of a multi-process feeding job, started like a
// torchrun job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); alone it runs
// as rank 0 of 1. Each rank loads its planned share of every epoch, runs a
// simulated training step, and agrees with the others through c10d.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli_output.h"
#include "cli_progress.h"
#include "commands.h"
#include "data/loader.h"
#include "dist/dist_group.h"
#include "dist/feed_job.h"
#include "dist/group_scan_exchange.h"
#include "telemetry/telemetry_publisher.h"
#include "util/busy_work.h"
#include "util/error.h"

namespace stoker {
namespace {

struct FeedArgs {
  FeedJobOptions job;
  std::string dataset = "fashion-mnist", device = "cpu", collectives = "auto", transforms, optionsFile;
  int workers = kNotGiven;  // not given: the options file's, else 1
  double stepMicros = 0, rendezvousTimeout = 60, collectiveTimeout = DistGroup::kDefaultCollectiveTimeoutSeconds;
  std::vector<double> rankStepMicros;
  std::vector<std::string> publish;
  bool noShuffle = false, json = false, noShareScans = false;
};

void runFeed(FeedArgs& a) {
  a.job.shuffle = !a.noShuffle;
  const auto env = distEnvFromEnvironment();
  const int rank = env ? env->rank : 0;
  requireBusyMicros("--step-us", a.stepMicros);
  for (double us : a.rankStepMicros) requireBusyMicros("--rank-step-us", us);
  if (!a.rankStepMicros.empty() && env && static_cast<int>(a.rankStepMicros.size()) != env->worldSize)
    throwBadInput("--rank-step-us", "has " + std::to_string(a.rankStepMicros.size()) + " entries for WORLD_SIZE " +
                                        std::to_string(env->worldSize));
  // At most a week: the seconds become milliseconds in an int64 (1e300 overflowed it), and no
  // rank waits longer than that for another.
  for (const auto& [flag, seconds] : {std::pair{"--rendezvous-timeout", a.rendezvousTimeout},
                                      std::pair{"--collective-timeout", a.collectiveTimeout}})
    if (!(seconds > 0 && seconds <= 7 * 86400))
      throwBadInput(flag, "must be more than 0 and at most 604800 seconds (a week)");
  // torchrun cannot give each rank its own --device: a bare "cuda" is this node's LOCAL_RANK'th
  // GPU, as a PyTorch script's torch.device("cuda", local_rank) (before, every rank took GPU 0),
  // where the process sees that many: a launcher that binds each rank to one GPU
  // (CUDA_VISIBLE_DEVICES) leaves it cuda:0.
  if (a.device == "cuda" && env) {
    int visible = 0;
    for (const DeviceSpec& d : expandDevices("all")) visible += d.kind == DeviceKind::Cuda ? 1 : 0;
    a.device = "cuda:" + std::to_string(env->localRank < visible ? env->localRank : 0);
  }
  // The loader's knobs (remote reads: part_size, max_inflight_parts, cache_dir, ...) from a
  // LoaderOptions file; the job's flags say what the plan needs.
  LoaderOptions o = a.optionsFile.empty() ? LoaderOptions{} : loadLoaderOptions(a.optionsFile);
  if (o.sampler_type == SamplerType::Distributed || o.sampler_type == SamplerType::Weighted ||
      o.sampler_type == SamplerType::RandomWithReplacement)
    throwBadInput("--options " + a.optionsFile, "sampler_type " + samplerTypeName(o.sampler_type) +
                                                    ": stoker feed's planner deals the samples to the ranks (leave it out)");
  // With weights a rank may take up to the whole global step (batch x world).
  o.batch_size = a.job.weights.empty() ? a.job.batchSize : a.job.batchSize * (env ? env->worldSize : 1);
  if (a.workers != kNotGiven) o.num_workers = a.workers;
  else if (a.optionsFile.empty() || !loaderOptionsFileSets(a.optionsFile, "num_workers")) o.num_workers = 1;  // feed's default
  o.prefetch = std::max(o.prefetch, prefetchForWorkers(o.num_workers));  // every worker busy
  o.drop_last = a.job.dropLast;
  if (!a.transforms.empty()) o.transforms = a.transforms;
  refuseTransformsUnlessImages(a.dataset, o.transforms, a.transforms.empty() ? "transforms (--options)" : "--transforms");
  validateLoaderOptions(o);  // the loader serves what the plan feeds it: no sampler sharding here
  const DeviceSpec device = DeviceSpec::parse(a.device);
  // What can fail on this rank alone fails before it joins the others: a device this machine or
  // build lacks, a telemetry address it cannot take.
  (void)DeviceBackend::create(device);
  std::shared_ptr<TelemetryPublisher> publisher;
  if (!a.publish.empty()) publisher = std::make_shared<TelemetryPublisher>(a.publish);
  // Ranks that feed GPUs talk through NCCL (as a PyTorch job on GPUs would), others through Gloo.
  const int cudaDevice = device.kind == DeviceKind::Cuda ? device.index : -1;
  CollectiveBackend backend = collectiveBackendFor(cudaDevice);
  if (a.collectives == "gloo") backend = CollectiveBackend::Gloo;  // e.g. several ranks sharing one GPU
  if (a.collectives == "nccl") {
    if (cudaDevice < 0) throwBadInput("--collectives nccl", "needs a CUDA --device (cuda:N); " + a.device + " ranks use gloo");
    if (backend != CollectiveBackend::Nccl) throwBadInput("--collectives nccl", "this stoker's libtorch has no NCCL (use gloo)");
  }
  std::unique_ptr<DistGroup> group;
  // A backend named on the command line forms the group even for one rank, as
  // init_process_group does (gpu-check's NCCL rank on a machine with one GPU).
  if (env && (env->worldSize > 1 || a.collectives != "auto")) {
    group = DistGroup::connect(*env, a.rendezvousTimeout, backend, cudaDevice, a.collectiveTimeout);
    if (!a.json) std::fprintf(stderr, "rank %d: collectives over %s\n", rank, collectiveBackendName(backend).c_str());
  }
  // The group is formed first: ranks opening remote WebDataset shards share their scans over it.
  const auto opening = std::chrono::steady_clock::now();
  std::shared_ptr<Dataset> dataset;
  {
    OpeningProgress opening(a.json, nullptr);
    dataset = openDatasetSharingScans(a.dataset, o, a.noShareScans ? nullptr : group.get());
  }
  const double openSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - opening).count();
  Loader loader(dataset, o, device);
  // feed's default of 1 worker is nobody's choice: uncached remote token windows get enough to keep
  // the network busy (each batch waits a round trip).
  if (a.workers == kNotGiven && (a.optionsFile.empty() || !loaderOptionsFileSets(a.optionsFile, "num_workers")))
    loader.raiseWorkersForNetwork(!a.optionsFile.empty() && loaderOptionsFileSets(a.optionsFile, "prefetch") ? 0 : 2);
  loader.setTelemetryRank(rank);
  if (group) loader.setTelemetryCollectives(collectiveBackendName(backend));
  if (publisher) loader.addObserver(publisher);
  const double micros = a.rankStepMicros.empty() ? a.stepMicros : a.rankStepMicros[static_cast<std::size_t>(rank)];
  const auto reports = runFeedJob(loader, group.get(), a.job, [&](const std::vector<Batch>& batches) {
    busyWork(micros * static_cast<double>(batches.size()));  // the "training step", per batch
  });
  if (publisher) publisher->flush(500);
  nlohmann::json epochs = nlohmann::json::array();
  for (const auto& r : reports)
    epochs.push_back({{"epoch", r.epoch},
                      {"resume_from", r.resumeFrom},
                      {"steps", r.steps},
                      {"samples", r.samples},
                      {"padding", r.padding},
                      {"plan_digest", r.planDigest},
                      {"el_che_counts", r.elCheCounts},
                      {"seconds", r.seconds}});
  nlohmann::json doc = {{"rank", rank},
                        {"world_size", env ? env->worldSize : 1},
                        {"open_s", openSeconds},
                        {"num_workers", loader.options().num_workers},
                        {"epochs", epochs}};
  if (group) doc["collectives"] = collectiveBackendName(group->backend());
  if (a.json) {
    printJson(doc);
    return;
  }
  std::printf("rank %d: opened the dataset in %.2f s, %d workers\n", rank, openSeconds, loader.options().num_workers);
  for (const auto& r : reports)
    std::printf("rank %d epoch %lld: %lld steps, %lld samples (%lld padding)%s in %.2f s, plan %s\n", rank,
                static_cast<long long>(r.epoch), static_cast<long long>(r.steps), static_cast<long long>(r.samples),
                static_cast<long long>(r.padding),
                r.resumeFrom > 0 ? (", resumed after " + std::to_string(r.resumeFrom)).c_str() : "", r.seconds,
                r.planDigest.c_str());
}

}  // namespace

void addFeedCommands(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<FeedArgs>();
  FeedJobOptions& j = args->job;
  auto* feed = app.add_subcommand("feed", "Run one rank of a multi-process feeding job (torchrun environment)");
  feed->add_option("--dataset", args->dataset,
                   "dataset, as for bench (default fashion-mnist); ranks opening remote wds: shards share their scans");
  feed->add_option("--transforms", args->transforms, "image pipeline for imagefolder:/wds: datasets, as for bench");
  feed->add_flag("--no-share-scans", args->noShareScans, "every rank scans every remote wds: shard itself");
  feed->add_option("--batch-size", j.batchSize, "samples per rank per step (default 64)");
  feed->add_option("--epochs", j.epochs, "epochs (default 1)");
  feed->add_option("--seed", j.seed, "shuffle seed (default 0)");
  feed->add_flag("--no-shuffle", args->noShuffle, "keep the dataset order");
  feed->add_flag("--drop-last", j.dropLast, "cut the tail instead of padding");
  feed->add_option("--weights", j.weights, "per-rank weights for unequal GPUs (w0,w1,...)")->delimiter(',');
  feed->add_flag("--el-che", j.elChe, "per-rank batch counts from the ranks' exchanged step times");
  feed->add_option("--anchor-batches", j.anchorBatches, "El Che batches of the slowest rank per round (default 4)");
  feed->add_option("--step-us", args->stepMicros, "simulated training step per batch, microseconds");
  feed->add_option("--rank-step-us", args->rankStepMicros, "per-rank step time, microseconds (u0,u1,...)")->delimiter(',');
  feed->add_option("--workers", args->workers,
                   "loader worker threads per rank (default 1, or the --options file's num_workers; 16 for uncached "
                   "remote token windows)");
  feed->add_option("--options", args->optionsFile,
                   "LoaderOptions JSON file (knob names as keys: part_size, max_inflight_parts, cache_dir, ...); "
                   "the batch size, drop_last and the deal come from the job's flags");
  feed->add_option("--device", args->device, "cpu, sim:N, cuda:N or cuda (this node's LOCAL_RANK'th GPU) (default cpu)");
  feed->add_option("--collectives", args->collectives,
                   "c10d backend of the ranks: auto (NCCL when --device is CUDA, else Gloo; no group for one rank), gloo or nccl (a group even for one rank)")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
  feed->add_option("--progress", j.progressFile, "rank 0 records the committed progress here after each step");
  feed->add_flag("--resume", j.resume, "continue from --progress (any world size)");
  feed->add_option("--record", j.recordDir, "each rank appends the samples of each step to DIR/rank<r>.txt");
  feed->add_option("--rendezvous-timeout", args->rendezvousTimeout, "seconds to wait for every rank to join (default 60)");
  feed->add_option("--collective-timeout", args->collectiveTimeout,
                   "seconds a collective waits for the slowest rank (default 1800, torch's)");
  feed->add_option("--publish", args->publish,
                   "send telemetry to HOST:PORT (stoker monitor), file:PATH, listen:PORT (the monitor dials in) or "
                   "prometheus:PORT (serve /metrics); repeatable");
  feed->add_flag("--json", args->json, "print one JSON document per rank");
  feed->callback([args, &exitCode] {
    runFeed(*args);
    exitCode = 0;
  });
}

}  // namespace stoker
