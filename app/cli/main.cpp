// stoker: the command line. Exit status is the contract of DESIGN.md:
// 0 success, 1 the operation found a problem, 2 bad input or usage with one
// line "error: <what>: <why>" on stderr -- never a crash or a stack trace.
// A conversion stopped by Ctrl-C exits 130 after cleaning up.
#include <cstdio>
#include <exception>
#include <new>

#include <c10/util/Exception.h>

#include "commands.h"
#include "util/error.h"

namespace {

int fail(const std::string& message) {
  std::string line = message;
  for (auto& c : line)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
    return exitCode;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string("usage: ") + e.what() + " (see --help)");
  } catch (const stoker::Error& e) {
    if (e.kind() == stoker::ErrorKind::Cancelled) {
      std::fprintf(stderr, "cancelled: %s\n", e.what());
      return 130;  // what a shell reports for Ctrl-C
    }
    if (e.kind() == stoker::ErrorKind::Timeout || e.kind() == stoker::ErrorKind::OutOfMemory) {
      fail(e.what());
      return 1;  // the run started and hit a problem, the input was fine
    }
    return fail(e.what());
  } catch (const c10::Error& e) {
    return fail(std::string("libtorch: ") + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) {
    return fail(std::string("internal: ") + e.what());
  }
}
