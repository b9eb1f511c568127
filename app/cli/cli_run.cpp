#include "cli_run.h"

#include <cstdio>
#include <new>

#include "crash_report.h"
#include "net/remote_url.h"
#include "util/error.h"

namespace stoker {

int failLine(const std::string& message) {
  std::string line = redactedUrl(message);  // a URL's password or presigned signature never reaches a log
  for (auto& c : line)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 2;
}

int runCommandLine(CLI::App& app, int argc, char** argv, const int& exitCode,
                   const std::function<int(std::exception_ptr)>& more) {
  installCrashReport();  // never expected, but a crash on a machine we cannot reach must say where
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
    return failLine(std::string("usage: ") + e.what() + " (see --help)");
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Cancelled) {
      // A token's own error is "<subject>: cancelled"; said as "cancelled: <subject>", once.
      const std::string what = e.reason() == "cancelled" ? e.subject() : e.what();
      std::fprintf(stderr, "cancelled%s%s\n", what.empty() ? "" : ": ", redactedUrl(what).c_str());
      return 130;  // what a shell reports for Ctrl-C
    }
    if (e.kind() == ErrorKind::Timeout || e.kind() == ErrorKind::OutOfMemory || e.kind() == ErrorKind::Network) {
      failLine(e.what());
      return 1;  // the run started and hit a problem, the input was fine
    }
    return failLine(e.what());
  } catch (const std::bad_alloc&) {
    return failLine("out of memory");
  } catch (...) {
    if (more) {
      const int code = more(std::current_exception());
      if (code >= 0) return code;
    }
    try {
      throw;
    } catch (const std::exception& e) {
      return failLine(std::string("internal: ") + e.what());
    } catch (...) {
      return failLine("internal: an unknown exception");
    }
  }
}

}  // namespace stoker
