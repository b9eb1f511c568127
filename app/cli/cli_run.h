// cli_run: what both front ends share -- parse, run, and map every error to
// DESIGN.md's exit codes: 0 success, 1 the operation found a problem, 2 bad
// input or usage with one line "error: <what>: <why>" on stderr, 130 after a
// Ctrl-C. Never a crash or a stack trace.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace stoker {

// Prints "error: <message>" (one line) and returns 2.
int failLine(const std::string& message);

// `more` handles exception types of one front end (libtorch's c10::Error in stoker-torch) and
// returns an exit code, or -1 to leave the exception to the generic handling.
int runCommandLine(CLI::App& app, int argc, char** argv, const int& exitCode,
                   const std::function<int(std::exception_ptr)>& more = {});

}  // namespace stoker
