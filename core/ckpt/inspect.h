// ckpt/inspect: what a checkpoint path holds -- format, logical tensors and
// metadata -- without reading tensor data. Directory layouts (ranks, HF) are
// added by the reshard engine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace stoker {

enum class CheckpointFormat { Safetensors, Pt };

struct LogicalTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t nbytes = 0;
};

struct CheckpointInfo {
  std::string path;
  CheckpointFormat format = CheckpointFormat::Safetensors;
  std::optional<int> worldSize;         // ranks layouts only
  std::vector<LogicalTensor> tensors;   // name order for safetensors, dict order for .pt
  std::map<std::string, std::string> metadata;
  std::uint64_t totalBytes() const;
};

std::string formatName(CheckpointFormat f);

// Detects the format by content (zip signature = .pt) and extension, then
// validates it. Throws Error(BadInput) naming the path and the problem.
CheckpointInfo inspectCheckpoint(const std::string& path);

}  // namespace stoker
