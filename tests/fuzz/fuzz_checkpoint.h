// tests/fuzz/fuzz_checkpoint: what the checkpoint-layout targets share -- small valid
// safetensors shards to point fuzzed indexes at, and the checks run on a layout that inspect
// accepted (a reshard plan whose copy runs tile every output exactly).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/inspect.h"

namespace stoker::fuzz {

// A valid safetensors file: `headerJson` padded to 8 bytes, then `dataBytes` bytes of a counter.
std::string safetensorsBytes(const std::string& headerJson, std::uint64_t dataBytes);

// A scratch folder `name` holding `files` (file name -> bytes), written on the first call only.
std::string checkpointFolder(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files);

// Plans accepted, consistent checkpoints onto `ranks:3` and `hf:64` and walks every copy run.
void checkAcceptedCheckpoint(const CheckpointInfo& info);

}  // namespace stoker::fuzz
