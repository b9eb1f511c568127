// ckpt/inspect: what a checkpoint path holds -- its format, the logical
// (unsharded) tensors, where each tensor's bytes physically live, and every
// consistency problem found -- without reading tensor data.
// Formats: one .safetensors file, a PyTorch .pt state dict, a ranks directory
// (metadata.json + rank_<r>.safetensors, the ferrotorch schema) and an HF
// sharded directory (model.safetensors.index.json + model-0000i-of-0000n) and a
// PyTorch Distributed Checkpoint directory (.metadata + __<rank>_<n>.distcp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace stoker {

class PtFile;
class RemoteObject;

enum class CheckpointFormat { Safetensors, Pt, Ranks, Hf, Dcp };

// One stored block of a logical tensor: a row-major box of it, held
// contiguously in one file.
struct TensorPiece {
  int file = 0;                      // index into CheckpointInfo::files
  std::uint64_t dataOffset = 0;      // byte offset of the block in that file
  std::vector<std::int64_t> start;   // box origin in the logical tensor
  std::vector<std::int64_t> shape;   // box extent
  // A .pt tensor that is a strided view of its storage cannot be read in
  // place; it is loaded (gathered) by name instead.
  bool loadFromPt = false;
  std::size_t ptIndex = 0;           // into PtFile::tensors()
  // A DCP item that torch.save kept strided (a transposed parameter), or compressed: its storage
  // record is read whole from the piece's file and gathered into row-major order.
  struct Strided {
    std::uint64_t storageAt = 0;      // file offset of the storage record
    std::uint64_t storageBytes = 0;
    std::int64_t elementOffset = 0;
    std::vector<std::int64_t> stride;
    // A zstd-compressed item (torch >= 2.6's ZStandard extension): `itemBytes` at `itemAt` in the
    // file decompress to `plainBytes`, in which storageAt lies. Row-major items are Strided too.
    bool zstd = false;
    std::uint64_t itemAt = 0, itemBytes = 0, plainBytes = 0;
  };
  std::shared_ptr<const Strided> strided;
  bool loadsWhole() const { return loadFromPt || strided; }
};

struct LogicalTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;   // full, unsharded shape
  std::uint64_t nbytes = 0;
  std::optional<int> shardDim;       // ranks layout: split dimension (none = replicated)
  std::vector<std::int64_t> shardSizes;
  std::vector<TensorPiece> pieces;   // tile the tensor exactly; empty if it has problems
  // Ranks layout, a replicated tensor: the whole copies on ranks after the first, which `pieces`
  // reads. Conversions read the first; verify compares every copy with it.
  std::vector<TensorPiece> replicas;
};

struct CheckpointInfo {
  std::string path;
  CheckpointFormat format = CheckpointFormat::Safetensors;
  std::optional<int> worldSize;         // ranks layouts only
  std::vector<std::string> files;       // the data files, as paths or s3:// / http(s):// URLs
  // By file: the object opened at inspect for a remote file (its size and ETag: a conversion reads
  // through it, so an object replaced since is refused, never read), null for a local one.
  std::vector<std::shared_ptr<const RemoteObject>> remote;
  std::vector<LogicalTensor> tensors;   // name order (.pt: the state dict's order)
  std::map<std::string, std::string> metadata;
  std::vector<std::string> problems;    // contradictions between metadata and files
  // DCP's non-tensor items (step counters, RNG states, config): a DCP target copies them byte
  // for byte, tensor-only targets leave them out.
  struct Item {
    std::string name;
    std::uint64_t bytes = 0;
    int file = 0;              // where the item's bytes lie
    std::uint64_t offset = 0;
    // zstd-compressed: `storedBytes` at `offset` decompress to `bytes`.
    bool zstd = false;
    std::uint64_t storedBytes = 0;
  };
  std::vector<Item> nonTensorItems;
  std::shared_ptr<PtFile> pt;           // .pt sources: the opened archive

  std::uint64_t totalBytes() const;
  const LogicalTensor* find(const std::string& name) const;
};

std::string formatName(CheckpointFormat f);

// Detects the format by content and layout, validates every file (throws
// Error(BadInput) naming the file for malformed ones) and records
// contradictions between metadata and files in `problems`.
// s3:// and http(s):// paths: a .safetensors file, an HF *.index.json with its shards, or a folder
// URL ending in '/' that holds one of them -- read by their headers alone (range requests).
CheckpointInfo inspectCheckpoint(const std::string& path);

// Throws Error(BadInput) with the first problem (and how many more) if any.
void requireConsistent(const CheckpointInfo& info);

}  // namespace stoker
