#include <cstdio>
#include <memory>

#include "ckpt/inspect.h"
#include "cli_output.h"
#include "commands.h"

namespace stoker {

void addCkptCommands(CLI::App& app, int& exitCode) {
  auto* ckpt = app.add_subcommand("ckpt", "Inspect and convert checkpoints");
  ckpt->require_subcommand(1);

  struct InspectArgs {
    std::string path;
    bool json = false;
  };
  auto args = std::make_shared<InspectArgs>();
  auto* inspect = ckpt->add_subcommand("inspect", "List the tensors of a .safetensors or .pt file");
  inspect->add_option("PATH", args->path, "checkpoint file")->required();
  inspect->add_flag("--json", args->json, "print one JSON document");
  inspect->callback([args, &exitCode] {
    CheckpointInfo info = inspectCheckpoint(args->path);
    if (args->json)
      printJson(checkpointJson(info));
    else
      printCheckpointTable(info);
    exitCode = 0;
  });
}

}  // namespace stoker
