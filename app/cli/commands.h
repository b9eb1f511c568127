// commands: each group of `stoker` subcommands registers itself on the app.
// Handlers report problems by throwing stoker::Error; main() maps them to
// the exit status and the one-line message the CLI contract fixes.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include <cstdint>
#include <limits>

namespace stoker {
// What a number option holds when it was not given: no value a user can type (with -1 standing for
// "not given", --workers -5 ran with the options' workers and --batch-size -1 with their batch).
inline constexpr int kNotGiven = std::numeric_limits<int>::min();
inline constexpr std::int64_t kNotGiven64 = std::numeric_limits<std::int64_t>::min();

// What --dataset takes (bench, tune): every spec docs/cli.md lists, local or remote.
inline constexpr const char* kDatasetSpecHelp =
    "fashion-mnist[:DIR], synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]], imagefolder:DIR, wds:SHARDS, "
    "tokens:FILE.bin[,dtype=u16|u32][,ctx=N], megatron:PREFIX[,ctx=N], FILE.safetensors or FILE.npy; a path may be an s3:// or "
    "http(s):// URL (docs/cli.md: dataset specs)";

void addCkptCommands(CLI::App& app, int& exitCode);
void addDatasetCommands(CLI::App& app, int& exitCode);
void addBenchCommands(CLI::App& app, int& exitCode);  // bench, monitor
void addPlanCommands(CLI::App& app, int& exitCode);
void addFeedCommands(CLI::App& app, int& exitCode);
void addTuneCommands(CLI::App& app, int& exitCode);
// --transforms given for a dataset they do not shape (tokens:, .safetensors, ...) is refused rather
// than ignored, so a user comparing pipelines is not handed untransformed samples without a word.
}  // namespace stoker
