#include "fuzz_target.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <typeinfo>

#include "util/error.h"

namespace stoker::fuzz {

namespace {
std::map<std::string, TargetFn>& registry() {
  static std::map<std::string, TargetFn> targets;
  return targets;
}

struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/stoker-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("stoker fuzz: mkdtemp");
      std::abort();
    }
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

bool registerTarget(const char* name, TargetFn fn) {
  registry()[name] = fn;
  return true;
}

TargetFn findTarget(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

std::vector<std::string> targetNames() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : registry()) names.push_back(name);
  return names;
}

std::string runTarget(TargetFn fn, const std::uint8_t* data, std::size_t size) {
  try {
    fn(data, size);
    return {};
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::BadInput) {
      // STOKER_FUZZ_VERBOSE=1 shows why inputs were refused (are the seeds accepted at all?).
      static const bool verbose = std::getenv("STOKER_FUZZ_VERBOSE") != nullptr;
      if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
      return {};
    }
    return "stoker::Error of kind " + std::to_string(static_cast<int>(e.kind())) + " (expected BadInput): " + e.what();
  } catch (const std::exception& e) {
    return std::string("unexpected exception ") + typeid(e).name() + ": " + e.what();
  } catch (...) {
    return "unexpected exception of unknown type";
  }
}

const std::string& scratchDir() {
  static ScratchDir dir;
  return dir.path;
}

std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "stoker fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::string writeScratchFile(const std::string& name, const std::string& text) {
  return writeScratchFile(name, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::logic_error("invariant broken: " + what);
}

void checkHostTensor(const HostTensor& t) {
  const auto bytes = dtypeBytesFor(t.dtype, t.elementCount());
  check(bytes && *bytes == t.nbytes, "byte count = elements x dtype size");
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  volatile std::uint64_t sink = sum;
  (void)sink;
}

}  // namespace stoker::fuzz

#ifdef STOKER_LIBFUZZER
int stokerFuzzAbortOnFinding(stoker::fuzz::TargetFn fn, const std::uint8_t* data, std::size_t size) {
  const std::string problem = stoker::fuzz::runTarget(fn, data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "stoker fuzz finding: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
#endif
