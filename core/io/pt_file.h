// io/pt_file: PyTorch .pt state dicts (the torch.save zip format) without
// running pickle code. Reading is torch-free (minizip, io/zip_archive); the
// writers (io/pt_writer.cpp) use libtorch's zip writer. Opening reads only data.pkl, so listing the tensors of
// a large file is cheap; load() reads one tensor's storage record. Nested
// dicts and lists are flattened to dotted names ("model.layer.0.weight");
// non-tensor leaves (epoch counters, hyper-parameters) are kept as text.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/host_tensor.h"
#include "io/pickle_reader.h"
#include "io/zip_archive.h"

namespace stoker {

class RemoteObject;

struct PtTensorInfo {
  std::string name;
  PyTensorRef ref;
  std::uint64_t nbytes() const;
};

class PtFile {
 public:
  // Throws Error(BadInput) for non-zip, legacy (pre-1.6) and malformed files.
  static PtFile open(const std::string& path);
  // A .pt in S3 or behind HTTP(S) (io/remote_zip_reader): opening reads its zip directory and
  // data.pkl, never a tensor's bytes; path() is the object's URL (credentials redacted).
  static PtFile open(const std::shared_ptr<const RemoteObject>& object);

  const std::string& path() const { return path_; }
  const std::vector<PtTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& extras() const { return extras_; }

  // The tensor's values, C-contiguous (views of shared storages are gathered).
  HostTensor load(const PtTensorInfo& info) const;

  // Where the tensor's bytes start in the file when they can be read in place:
  // a C-contiguous view of an uncompressed storage record (what torch.save
  // writes). Empty for strided views and compressed records: load() those.
  std::optional<std::uint64_t> inPlaceOffset(const PtTensorInfo& info) const;

 private:
  const ZipArchive::Record& storageRecord(const PtTensorInfo& info) const;
  void readRecords();  // byteorder, then data.pkl's tensors and extras

  std::string path_;
  std::shared_ptr<const int> fd_;            // a local file: open while the archive is used
  std::shared_ptr<const ZipArchive> zip_;
  std::vector<PtTensorInfo> tensors_;
  std::map<std::string, std::string> extras_;
};

// Writes an OrderedDict state dict that torch.load reads; one storage record
// per tensor, streamed one at a time, renamed into place when complete.
// Throws Error(BadInput) for dtypes torch.save cannot express.
void writePt(const std::string& path, const std::vector<std::pair<std::string, HostTensor>>& tensors);

// The same, asking `produce(i)` for tensor i's bytes only when its record is
// written, so one tensor at a time is in memory. `specs` give name, dtype, shape.
struct TensorSpec;
void writePtStreaming(const std::string& path, const std::vector<TensorSpec>& specs,
                      const std::function<HostTensor(std::size_t)>& produce);

// What torch.save(tensor) writes for one contiguous CPU tensor -- a zip holding
// data.pkl, data/0 and byteorder -- pushed through `sink`; DCP's item format.
// Dtypes torch 1.13 lacks get torch 2.x's storage names (UInt16Storage).
// Returns the bytes written.
std::uint64_t writeTensorZip(const std::function<void(const void*, std::size_t)>& sink, const TensorSpec& spec,
                             const HostTensor& t, const std::string& subject);

}  // namespace stoker
