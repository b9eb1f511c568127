// `stoker plan`: prints which samples each rank gets in one epoch (the
// planner in core/plan), as a table or as the JSON the DESIGN contract fixes.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "data/dataset.h"
#include "plan/shard_plan.h"
#include "util/error.h"

namespace stoker {
namespace {

struct PlanArgs {
  PlanRequest request;
  std::vector<std::string> datasets;
  int rank = -1;
  bool noShuffle = false, json = false, noIndices = false;
};

std::string preview(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? " " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += " ...";
  return s;
}

void printPlanTable(const ShardPlan& plan, const PlanRequest& r, double ms) {
  std::printf("%s plan: %lld samples, world size %d, seed %llu, epoch %lld%s%s\n", plan.policy.c_str(),
              static_cast<long long>(plan.samples), r.worldSize, static_cast<unsigned long long>(r.seed),
              static_cast<long long>(r.epoch), r.shuffle ? "" : ", unshuffled", r.dropLast ? ", drop_last" : "");
  if (plan.resumeFrom > 0)
    std::printf("resumed after %lld samples: %lld remain\n", static_cast<long long>(plan.resumeFrom),
                static_cast<long long>(plan.remaining));
  std::printf("steps %lld, padding %lld, dropped %lld (planned in %.1f ms)\n", static_cast<long long>(plan.steps),
              static_cast<long long>(plan.padding), static_cast<long long>(plan.dropped), ms);
  std::printf("%6s %10s %8s %7s  %s\n", "rank", "samples", "padding", "steps", "first indices");
  for (const auto& rank : plan.ranks)
    std::printf("%6d %10zu %8lld %7zu  %s\n", rank.rank, rank.indices.size(), static_cast<long long>(rank.padding),
                rank.stepSizes.size(), preview(rank.indices).c_str());
}

void runPlan(PlanArgs& a) {
  PlanRequest& r = a.request;
  r.shuffle = !a.noShuffle;
  if (!a.datasets.empty()) {
    if (!r.shardSamples.empty()) throwBadInput("--dataset", "give either --dataset or --shard-samples, not both");
    for (const auto& spec : a.datasets) r.shardSamples.push_back(openDataset(spec)->size());
  }
  if (a.rank >= r.worldSize || a.rank < -1)
    throwBadInput("--rank", std::to_string(a.rank) + " is not a rank of world size " + std::to_string(r.worldSize) +
                                " (0-" + std::to_string(r.worldSize - 1) + ")");
  const auto start = std::chrono::steady_clock::now();
  ShardPlan plan = makeShardPlan(r);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (a.rank >= 0) plan.ranks = {plan.ranks[static_cast<std::size_t>(a.rank)]};
  if (a.json) std::printf("%s\n", shardPlanToJson(r, plan, !a.noIndices).c_str());
  else printPlanTable(plan, r, ms);
}

}  // namespace

void addPlanCommands(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<PlanArgs>();
  PlanRequest& r = args->request;
  auto* plan = app.add_subcommand("plan", "Show which samples each rank gets in an epoch (torch-compatible)");
  plan->add_option("--samples", r.samples, "samples in the dataset");
  plan->add_option("--shard-samples", r.shardSamples, "samples per shard file, in order (n0,n1,...)")->delimiter(',');
  plan->add_option("--dataset", args->datasets, "a dataset (as for bench) whose size is a shard; repeatable");
  plan->add_option("--world-size", r.worldSize, "number of ranks")->required();
  plan->add_option("--seed", r.seed, "shuffle seed (default 0, like DistributedSampler)");
  plan->add_option("--epoch", r.epoch, "epoch (the order is drawn with seed + epoch)");
  plan->add_flag("--drop-last", r.dropLast, "cut the tail instead of padding ranks to equal length");
  plan->add_flag("--no-shuffle", args->noShuffle, "keep the dataset order");
  plan->add_option("--resume-from", r.resumeFrom, "continue after the first K samples of the epoch's order");
  plan->add_option("--weights", r.weights, "per-rank weights for unequal GPUs (w0,w1,...)")->delimiter(',');
  plan->add_option("--step-ms", r.stepMs, "per-rank milliseconds per batch: El Che batch counts (t0,t1,...)")
      ->delimiter(',');
  auto* anchor = plan->add_option("--anchor-batches", r.anchorBatches, "batches the slowest rank runs per El Che round (default 4)");
  plan->add_option("--batch-size", r.batchSize, "samples per rank per step (splits the plan into steps)");
  plan->add_option("--rank", args->rank, "print only this rank");
  plan->add_flag("--no-indices", args->noIndices, "JSON without the index lists (counts and steps only)");
  plan->add_flag("--json", args->json, "print one JSON document");
  plan->callback([args, anchor, &exitCode] {
    // El Che's round size means nothing to an even or weighted split (it was silently ignored).
    if (anchor->count() > 0 && args->request.stepMs.empty())
      throwBadInput("--anchor-batches", "used only with --step-ms (El Che's batch counts)");
    runPlan(*args);
    exitCode = 0;
  });
}

}  // namespace stoker
