// stoker: the command line users run. Loading libtorch costs ~0.7 s per process here, so this
// front end links only the torch-free core (stoker_bytes) and answers `stoker ckpt inspect`,
// `verify` and the conversions that only move bytes itself, in milliseconds. Every other command
// -- and a conversion that needs torch (a dtype change, a .pt or DCP output) -- is handed to
// stoker-torch with the same arguments (exec: same process, same pid, same exit status).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/torch_ops.h"
#include "cli_run.h"
#include "commands.h"
#include "util/error.h"

namespace {

// Next to this executable (the build tree), or in ../lib/stoker (the installed package). Without
// /proc, only the install location this was built for: never a path relative to the working
// directory, which may be an untrusted download.
[[noreturn]] void execTorchFrontEnd(char** argv) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec && self.is_absolute())
    candidates = {self.parent_path() / "stoker-torch", self.parent_path() / "../lib/stoker/stoker-torch"};
  else
    candidates = {fs::path(STOKER_TORCH_INSTALLED)};
  std::string tried;
  for (const fs::path& candidate : candidates) {
    ::execv(candidate.c_str(), argv);
    tried += (tried.empty() ? "" : ", ") + candidate.lexically_normal().string() + " (" + std::strerror(errno) + ")";
  }
  std::exit(stoker::failLine("stoker: this command needs stoker-torch, the libtorch half of the command line; tried " + tried));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("stoker 0.1.0\n");
    return 0;
  }
  if (argc < 2 || std::string(argv[1]) != "ckpt") execTorchFrontEnd(argv);  // help lists every command
  CLI::App app{"stoker: keep GPUs fed -- loaders, sharding plans, checkpoint resharding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker 0.1.0");
  int exitCode = 0;
  stoker::addCkptCommands(app, exitCode);
  return stoker::runCommandLine(app, argc, argv, exitCode, [argv](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const stoker::NeedsLibtorch&) {
      execTorchFrontEnd(argv);  // decided before anything was written
    } catch (...) {
      return -1;
    }
  });
}
