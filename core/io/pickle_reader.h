// io/pickle_reader: a restricted unpickler for the data.pkl inside torch.save
// archives. It runs no code: it knows the handful of callables a state dict
// uses (OrderedDict, _rebuild_tensor_v2, _rebuild_parameter, the storage
// classes) and refuses every other global -- the same contract as
// torch.load(weights_only=True). Torch-free: it describes tensors, storage
// records are read by io/pt_file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/dtype.h"

namespace stoker {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

struct PyTensorRef {
  std::string storageKey;        // record "data/<key>" in the archive
  Dtype dtype = Dtype::F32;
  std::int64_t storageNumel = 0; // elements in the storage record
  std::string location;          // "cpu", "cuda:0", ...
  std::int64_t offset = 0;       // in elements
  std::vector<std::int64_t> size, stride;
};

struct PyValue {
  // Object: an instance of an allowed class (DCP metadata profile only); `text` is the class
  // ("module.Name") and its BUILD state lands in `dict` (a __dict__) or `items` (a tuple).
  enum class Kind { None, Bool, Int, Float, String, Bytes, Tuple, List, Dict, Global, Storage, Tensor, Object };
  Kind kind = Kind::None;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;                          // String, Bytes, Global ("module.name")
  std::vector<PyRef> items;                  // Tuple, List
  std::vector<std::pair<PyRef, PyRef>> dict; // Dict, in insertion order
  PyTensorRef tensor;                        // Storage, Tensor
};

// What a pickle may hold. StateDict: torch.save's data.pkl (tensors, containers, scalars).
// DcpMetadata: a torch.distributed.checkpoint `.metadata` -- also instances of DCP's own
// dataclasses (Metadata, TensorStorageMetadata, ChunkStorageMetadata, BytesStorageMetadata,
// MetadataIndex, TensorProperties, StorageMeta, _StorageInfo, under their torch 1.13 and 2.x
// module paths), torch.Size (a Tuple), torch dtypes (Global "torch.float32"), layouts and the
// memory-format enum (String names) and pathlib paths (String); still no code runs.
enum class PickleProfile { StateDict, DcpMetadata };

// Throws Error(BadInput) naming `subject` for malformed pickles, unsupported
// opcodes and disallowed globals.
PyRef unpickle(const std::uint8_t* data, std::size_t n, const std::string& subject,
               PickleProfile profile = PickleProfile::StateDict);

// The dtype of a torch dtype global's name ("torch.float32", "torch.uint16"), if Stoker has one.
std::optional<Dtype> dtypeFromTorchName(const std::string& name);

// The storage class name torch.save uses for a dtype ("FloatStorage"), or
// empty when torch 1.13 has none (U16/U32/U64, FP8, sub-byte floats); with
// `torch2`, also the names torch >= 2.3 has for those ("UInt16Storage").
std::string torchStorageClass(Dtype d, bool torch2 = false);

}  // namespace stoker
