// tests/fuzz/fuzz_target: one parser per fuzz target, written once and run two ways.
//  - Built with clang's libFuzzer (STOKER_LIBFUZZER, `packaging/stoker.sh fuzz`), a target file
//    becomes that fuzzer's LLVMFuzzerTestOneInput.
//  - Built normally, every target registers itself with tst_fuzz_regressions, which feeds it each
//    committed seed (tests/fuzz/corpus/<target>/) and every input a fuzzer ever crashed on
//    (tests/fuzz/regressions/<target>/), so a fixed bug stays fixed in the ordinary test suite.
// A malformed input must end in stoker::Error(BadInput); any other exception, another error kind,
// a crash, a leak or a sanitizer report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/host_tensor.h"

namespace stoker::fuzz {

using TargetFn = void (*)(const std::uint8_t* data, std::size_t size);

bool registerTarget(const char* name, TargetFn fn);
TargetFn findTarget(const std::string& name);
std::vector<std::string> targetNames();

// Runs a target on one input. Returns "" when it accepted the input or refused it with
// Error(BadInput), otherwise what went wrong (the exception's type and message).
std::string runTarget(TargetFn fn, const std::uint8_t* data, std::size_t size);

// Targets whose parser reads files get a private scratch directory (under $TMPDIR, removed at
// exit) and write the input there.
const std::string& scratchDir();
std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size);
std::string writeScratchFile(const std::string& name, const std::string& text);

// A tensor a reader accepted: its byte count is elements x dtype size, and every byte is readable
// (ASan sees a view that runs past its mapping or buffer).
void checkHostTensor(const HostTensor& t);

// An invariant of an accepted input that does not hold: a finding, like a crash.
void check(bool ok, const std::string& what);

}  // namespace stoker::fuzz

#define STOKER_FUZZ_CONCAT2(a, b) a##b
#define STOKER_FUZZ_CONCAT(a, b) STOKER_FUZZ_CONCAT2(a, b)

#ifdef STOKER_LIBFUZZER
// The libFuzzer entry point: an unexpected outcome aborts, so libFuzzer saves the input.
int stokerFuzzAbortOnFinding(stoker::fuzz::TargetFn fn, const std::uint8_t* data, std::size_t size);
#define STOKER_FUZZ_ENTRY(name, fn)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return stokerFuzzAbortOnFinding(fn, data, size);                                  \
  }
#else
#define STOKER_FUZZ_ENTRY(name, fn) \
  static const bool STOKER_FUZZ_CONCAT(stokerFuzzRegistered_, name) = stoker::fuzz::registerTarget(#name, fn);
#endif

// STOKER_FUZZ_TARGET(name) { ...body using `data` and `size`... }
#define STOKER_FUZZ_TARGET(name)                                                                  \
  static void STOKER_FUZZ_CONCAT(stokerFuzzBody_, name)(const std::uint8_t* data, std::size_t size); \
  STOKER_FUZZ_ENTRY(name, &STOKER_FUZZ_CONCAT(stokerFuzzBody_, name))                              \
  static void STOKER_FUZZ_CONCAT(stokerFuzzBody_, name)(const std::uint8_t* data, std::size_t size)
