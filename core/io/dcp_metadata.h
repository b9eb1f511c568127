// io/dcp_metadata: the `.metadata` file of a PyTorch Distributed Checkpoint
// (torch.distributed.checkpoint, torch 1.13's torch.distributed._shard.checkpoint)
// read with the restricted unpickler: which tensors and non-tensor items the
// checkpoint holds, their chunks (n-d boxes) and where each chunk's item lies
// (file, offset, length). Torch-free; nothing in the pickle is executed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace stoker {

// _StorageInfo: an item's bytes are `length` bytes at `offset` in `relativePath`.
struct DcpStorage {
  std::string relativePath;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<std::string> transforms;  // transform_descriptors (torch >= 2.6), e.g. "stream.zstd/1"
};

struct DcpChunk {
  std::vector<std::int64_t> offsets, sizes;
  std::optional<DcpStorage> storage;  // empty when storage_data has no entry for it
};

struct DcpEntry {
  std::string fqn;
  bool isTensor = true;                 // false: BytesStorageMetadata (a torch.save'd object)
  std::string torchDtype;               // "torch.float32"
  std::optional<Dtype> dtype;           // empty for dtypes Stoker does not know
  std::vector<std::int64_t> size;       // the whole tensor
  std::vector<DcpChunk> chunks;
  std::optional<DcpStorage> bytes;      // non-tensor items
};

struct DcpMetadata {
  std::vector<DcpEntry> entries;        // state_dict_metadata, in its order
  bool torch2Modules = false;           // classes under torch.distributed.checkpoint (torch >= 2.0)
  std::optional<std::string> version;   // Metadata.version (torch >= 2.6)
};

// Throws Error(BadInput) naming `subject` (the .metadata path) for anything that is not a
// DCP Metadata pickle: truncated, not a pickle, a class outside DCP's, fields of the wrong type.
DcpMetadata parseDcpMetadata(const std::uint8_t* data, std::size_t n, const std::string& subject);

}  // namespace stoker
