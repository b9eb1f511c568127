// ckpt/layout_readers: the directory layouts behind inspectCheckpoint (internal).
#pragma once

#include <string>

#include "ckpt/inspect.h"
#include "io/safetensors_file.h"

namespace stoker {

// metadata.json + rank_<r>.safetensors (ferrotorch schema).
void readRanksDirectory(const std::string& dir, CheckpointInfo& info);
// .metadata + the .distcp files it names (PyTorch Distributed Checkpoint).
void readDcpDirectory(const std::string& dir, CheckpointInfo& info);
// model.safetensors.index.json + the shard files it names.
void readHfIndex(const std::string& indexPath, CheckpointInfo& info);

// A piece holding the whole tensor.
TensorPiece wholeTensorPiece(int file, const SafetensorsFile& f, const SafetensorsEntry& e);
LogicalTensor logicalTensor(std::string name, Dtype dtype, std::vector<std::int64_t> shape, std::uint64_t nbytes);
// Adds a file to info.files and returns its index.
int addFile(CheckpointInfo& info, const std::string& path);

}  // namespace stoker
