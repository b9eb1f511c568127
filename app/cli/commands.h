// commands: each group of `stoker` subcommands registers itself on the app.
// Handlers report problems by throwing stoker::Error; main() maps them to
// the exit status and the one-line message the CLI contract fixes.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace stoker {
void addCkptCommands(CLI::App& app, int& exitCode);
void addDatasetCommands(CLI::App& app, int& exitCode);
void addBenchCommands(CLI::App& app, int& exitCode);  // bench, monitor
void addPlanCommands(CLI::App& app, int& exitCode);
void addFeedCommands(CLI::App& app, int& exitCode);
void addTuneCommands(CLI::App& app, int& exitCode);
// --transforms given for a dataset they do not shape (tokens:, .safetensors, ...) is refused rather
// than ignored, so a user comparing pipelines is not handed untransformed samples without a word.
}  // namespace stoker
