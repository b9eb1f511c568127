#include "fuzz_checkpoint.h"

#include <filesystem>

#include "ckpt/reshard_plan.h"
#include "fuzz_target.h"

namespace stoker::fuzz {

std::string safetensorsBytes(const std::string& headerJson, std::uint64_t dataBytes) {
  std::string header = headerJson;
  while (header.size() % 8) header += ' ';
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  for (std::uint64_t i = 0; i < dataBytes; ++i) out += static_cast<char>(i * 7 + 1);
  return out;
}

std::string checkpointFolder(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  const std::string dir = scratchDir() + "/" + name;
  if (!std::filesystem::exists(dir)) {
    std::filesystem::create_directories(dir);
    for (const auto& [file, bytes] : files) writeScratchFile(name + "/" + file, bytes);
  }
  return dir;
}

void checkAcceptedCheckpoint(const CheckpointInfo& info) {
  requireConsistent(info);  // throws BadInput when inspect recorded problems
  for (const char* to : {"ranks:3", "hf:64"}) {
    const ReshardPlan plan = planReshard(info, parseTargetSpec(to, "keep"));
    for (const auto& file : plan.files)
      for (const auto& t : file.tensors) {
        RunCursor cursor(t);
        std::uint64_t bytes = 0;
        CopyRun run;
        while (cursor.next(run)) bytes += run.length;
        check(bytes == t.nbytes, std::string("copy runs tile output tensor ") + t.name + " for " + to);
      }
  }
}

}  // namespace stoker::fuzz
