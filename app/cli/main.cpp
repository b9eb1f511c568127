// stoker-torch: the whole command line, on libtorch (the loader, plans, feeding, tuning, and the
// checkpoint conversions that need torch). Users run `stoker`, which answers the byte-level
// checkpoint commands itself and hands everything else to this program (main_bytes.cpp).
#include <c10/util/Exception.h>

#include "cli_run.h"
#include "commands.h"
#include "util/open_file_limit.h"

int main(int argc, char** argv) {
  stoker::raiseOpenFileLimit();  // `stoker monitor` takes a connection per rank
  CLI::App app{"stoker: keep GPUs fed -- loaders, sharding plans, checkpoint resharding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker 0.1.0");
  int exitCode = 0;
  stoker::addCkptCommands(app, exitCode);
  stoker::addDatasetCommands(app, exitCode);
  stoker::addBenchCommands(app, exitCode);
  stoker::addPlanCommands(app, exitCode);
  stoker::addFeedCommands(app, exitCode);
  stoker::addTuneCommands(app, exitCode);
  return stoker::runCommandLine(app, argc, argv, exitCode, [](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const c10::Error& t) {
      return stoker::failLine(std::string("libtorch: ") + t.what_without_backtrace());
    } catch (...) {
      return -1;
    }
  });
}
