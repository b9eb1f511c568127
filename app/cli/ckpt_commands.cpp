// stoker ckpt inspect|convert|verify (DESIGN.md, "Command line").
#include <cstdio>
#include <algorithm>
#include <memory>
#include <thread>

#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "ckpt/select.h"
#include "ckpt/torch_ops.h"
#include "ckpt/verify.h"
#include "cli_output.h"
#include "cli_progress.h"
#include "commands.h"
#include "dist/torchrun_env.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {
namespace {

// torchrun exports RANK and WORLD_SIZE (read and checked as `stoker feed`
// does); flags win over the environment.
void rankFromEnvironment(int& rank, int& worldSize, bool rankGiven, bool worldGiven) {
  if (rankGiven != worldGiven) throwBadInput("--rank/--world-size", "give both or neither");
  if (rankGiven) return;
  if (const auto env = distEnvFromEnvironment()) {
    rank = env->rank;
    worldSize = env->worldSize;
  }
}

void addInspect(CLI::App& ckpt, int& exitCode) {
  struct Args {
    std::string path;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = ckpt.add_subcommand("inspect", "List the logical tensors of a checkpoint and how they are stored");
  cmd->add_option("PATH", args->path,
                  ".safetensors, .pt, ranks directory, HF directory or index file, DCP directory; or an s3:// or "
                  "http(s):// URL of one")->required();
  cmd->add_flag("--json", args->json, "print one JSON document");
  cmd->callback([args, &exitCode] {
    CheckpointInfo info = inspectCheckpoint(args->path);
    if (args->json)
      printJson(checkpointJson(info));
    else
      printCheckpointTable(info);
    requireConsistent(info);  // problems: shown above, and exit 2
    exitCode = 0;
  });
}

void addConvert(CLI::App& ckpt, int& exitCode) {
  struct Args {
    std::string src, dst, to, dtype = "keep", budget = "256MiB";
    std::vector<std::string> includes, excludes;
    int jobs = std::max(2u, std::thread::hardware_concurrency()), rank = 0, worldSize = 1;
    bool dryRun = false, resume = false, force = false, json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = ckpt.add_subcommand("convert", "Reshard or convert a checkpoint, streaming with bounded memory");
  cmd->add_option("SRC", args->src, "source checkpoint")->required();
  cmd->add_option("DST", args->dst, "destination directory")->required();
  cmd->add_option("--to", args->to, "ranks:M | hf | hf:SIZE | single | pt | dcp | dcp:M")->required();
  cmd->add_option("--include", args->includes, "keep only tensors whose name matches this glob (repeatable), e.g. 'model.*'");
  cmd->add_option("--exclude", args->excludes, "leave out tensors whose name matches this glob (repeatable), e.g. 'optim.*'");
  cmd->add_option("--dtype", args->dtype, "keep | f32 | f16 | bf16 (floating tensors only)");
  cmd->add_option("--memory-budget", args->budget, "memory for buffers, e.g. 256MiB (default)");
  auto* jobsOpt = cmd->add_option("--jobs", args->jobs,
                                  "output files written in parallel (default: the number of cores, at least 2; "
                                  "up to 4 when only bytes move)");
  cmd->add_flag("--dry-run", args->dryRun, "print the plan and write nothing");
  cmd->add_flag("--resume", args->resume, "finish an interrupted conversion into DST");
  cmd->add_flag("--force", args->force, "replace checkpoint files already in DST");
  auto* rankOpt = cmd->add_option("--rank", args->rank, "this process's share of the outputs (with --world-size)");
  auto* worldOpt = cmd->add_option("--world-size", args->worldSize, "number of cooperating processes");
  cmd->add_flag("--json", args->json, "print one JSON document");
  cmd->callback([args, rankOpt, worldOpt, jobsOpt, &exitCode] {
    TargetSpec target = parseTargetSpec(args->to, args->dtype);
    ConvertOptions options;
    options.memoryBudget = parseByteSize(args->budget, "--memory-budget");
    options.jobs = args->jobs;
    options.resume = args->resume;
    options.force = args->force;
    options.rank = args->rank;
    options.worldSize = args->worldSize;
    rankFromEnvironment(options.rank, options.worldSize, rankOpt->count() > 0, worldOpt->count() > 0);

    CheckpointInfo info = inspectCheckpoint(args->src);
    selectTensors(info, args->includes, args->excludes);
    requireConsistent(info);
    ReshardPlan plan = planReshard(info, target);
    if (jobsOpt->count() == 0) options.jobs = defaultConvertJobs(plan, options.memoryBudget);
    if (args->dryRun) {
      validateConvertOptions(plan, options);
      if (args->json)
        printJson(planJson(info, plan, options));
      else
        printPlanTable(info, plan, options);
      exitCode = 0;
      return;
    }
    if (!torchCheckpointOps() && conversionNeedsLibtorch(plan))
      throw NeedsLibtorch("stoker ckpt convert --to " + targetName(plan.target));  // stoker-torch takes over
    CancelToken cancel;
    cancelOnInterrupt(cancel);
    TerminalProgress progress("converting");
    options.progress = &progress;
    options.cancel = &cancel;
    if (!info.nonTensorItems.empty() && plan.target.kind != TargetKind::Dcp) {
      std::string names;
      for (std::size_t i = 0; i < info.nonTensorItems.size() && i < 8; ++i) names += (i ? ", " : "") + info.nonTensorItems[i].name;
      if (info.nonTensorItems.size() > 8) names += ", ...";
      progress.note("note: " + std::to_string(info.nonTensorItems.size()) + " non-tensor item(s) are left out (" + names +
                    "): " + targetName(target) + " holds tensors only");
    }
    ConvertReport report = convertCheckpoint(info, plan, args->dst, options);
    for (const auto& [tensor, o] : report.f16Overflows)
      progress.note("warning: " + tensor + ": " + std::to_string(o.count) + " value(s) exceed the F16 range (max |x| = " +
                    std::to_string(o.maxAbs) + "); like torch, they become +-65504 or +-inf");
    if (args->json)
      printJson(convertJson(info, plan, args->dst, report));
    else
      printConvertSummary(plan, args->dst, report);
    exitCode = report.f16Overflows.empty() ? 0 : 1;
  });
}

void addVerify(CLI::App& ckpt, int& exitCode) {
  struct Args {
    std::string a, b;
    int jobs = 2;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = ckpt.add_subcommand("verify", "Check that two checkpoints hold the same tensors, whatever their layouts");
  cmd->add_option("A", args->a, "first checkpoint")->required();
  cmd->add_option("B", args->b, "second checkpoint")->required();
  cmd->add_option("--jobs", args->jobs, "tensors hashed in parallel (default 2)");
  cmd->add_flag("--json", args->json, "print one JSON document");
  cmd->callback([args, &exitCode] {
    if (args->jobs < 1 || args->jobs > 256) throwBadInput("--jobs", "must be from 1 to 256");
    CheckpointInfo a = inspectCheckpoint(args->a);
    CheckpointInfo b = inspectCheckpoint(args->b);
    CancelToken cancel;
    cancelOnInterrupt(cancel);
    TerminalProgress progress("verifying");
    VerifyOptions options{args->jobs, &progress, &cancel};
    VerifyResult r = verifyCheckpoints(a, b, options);
    if (args->json) {
      nlohmann::json doc = {{"equal", r.equal}, {"tensors_compared", r.tensorsCompared},
                            {"non_tensor_items_not_compared", r.itemsNotCompared}};
      doc["first_difference"] = r.equal ? nlohmann::json(nullptr)
                                        : nlohmann::json({{"tensor", r.tensor}, {"reason", r.reason}});
      printJson(doc);
    } else if (r.equal) {
      std::printf("equal: %zu tensors, same names, dtypes, shapes and values\n", r.tensorsCompared);
      if (r.itemsNotCompared > 0)
        std::printf("not compared: %zu non-tensor items (step counters, RNG states, config): verify compares tensors\n",
                    r.itemsNotCompared);
    } else {
      std::printf("different: tensor \"%s\": %s\n", r.tensor.c_str(), r.reason.c_str());
    }
    exitCode = r.equal ? 0 : 1;
  });
}

}  // namespace

void addCkptCommands(CLI::App& app, int& exitCode) {
  auto* ckpt = app.add_subcommand("ckpt", "Inspect, convert and verify checkpoints");
  ckpt->require_subcommand(1);
  addInspect(*ckpt, exitCode);
  addConvert(*ckpt, exitCode);
  addVerify(*ckpt, exitCode);
}

}  // namespace stoker
