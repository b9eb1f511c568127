// ckpt/layout_readers: the directory layouts behind inspectCheckpoint (internal).
#pragma once

#include <functional>
#include <memory>
#include <optional>
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

// One shard's header, from a local file or a remote object.
struct HfShard {
  std::string path;  // as info.files will hold it
  SafetensorsHeader header;
  std::shared_ptr<const RemoteObject> remote;  // null for a local file
};
// A safetensors file in S3 or behind HTTP(S) by its header alone (one range request when it fits
// in 64 KiB, two otherwise); `object`: the file opened already (with 64 KiB), else opened here.
HfShard remoteSafetensorsHeader(const std::string& url, std::shared_ptr<const RemoteObject> object = nullptr);
// The shards named by an index, by file name; a missing one is nullopt (a problem, not an error).
using HfShardOpener = std::function<std::vector<std::optional<HfShard>>(const std::vector<std::string>& names)>;
// The HF layout from the index's text: where it came from (`indexPath`, for messages) and how its
// shards are opened.
void readHfIndexText(const std::string& text, const std::string& indexPath, const HfShardOpener& openShards,
                     CheckpointInfo& info);

// A piece holding the whole tensor.
TensorPiece wholeTensorPiece(int file, const SafetensorsHeader& h, const SafetensorsEntry& e);
LogicalTensor logicalTensor(std::string name, Dtype dtype, std::vector<std::int64_t> shape, std::uint64_t nbytes);
// Adds a file to info.files (and its remote object, null for a local file) and returns its index.
int addFile(CheckpointInfo& info, const std::string& path, std::shared_ptr<const RemoteObject> remote = nullptr);

}  // namespace stoker
