// io/safetensors_writer: streams tensors into a safetensors file one at a time
// (never all in memory), in the official writer's order (descending dtype
// alignment, then name), header padded with spaces to 8 bytes. The file is
// written under a temporary name and renamed into place by finish().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/dtype.h"
#include "io/host_tensor.h"

namespace stoker {

class AtomicFile;

struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
};

// Where every tensor lands in a file the writer would produce.
struct SafetensorsLayout {
  std::string header;                  // padded JSON, without the 8-byte length
  std::vector<TensorSpec> order;       // the order data follows the header
  std::vector<std::uint64_t> offsets;  // begin of each `order` entry in the data section
  std::vector<std::uint64_t> sizes;
  std::uint64_t fileSize() const;
};

// Throws Error(BadInput) for duplicate or invalid names and overflowing shapes.
SafetensorsLayout planSafetensorsLayout(std::vector<TensorSpec> tensors,
                                        const std::map<std::string, std::string>& metadata);

class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // without finish(), nothing appears under `path`

  const std::vector<TensorSpec>& writeOrder() const { return layout_.order; }
  const SafetensorsLayout& layout() const { return layout_; }

  // Appends bytes of the tensors in writeOrder(); a tensor may arrive in many
  // pieces and a piece may span tensors.
  void append(const void* data, std::size_t n);
  // Appends `n` bytes read from another file at `offset`, copied in the kernel.
  void appendFrom(int fd, std::uint64_t offset, std::uint64_t n, const std::string& source);
  // Appends one whole tensor, which must be the next in writeOrder().
  void write(const std::string& name, const void* data, std::size_t n);
  // Checks that every byte arrived, fsyncs and renames into place.
  void finish();

  std::uint64_t dataBytesWritten() const { return written_; }

 private:
  std::string path_;
  SafetensorsLayout layout_;
  std::unordered_map<std::string, std::size_t> index_;
  std::unique_ptr<AtomicFile> out_;
  std::uint64_t written_ = 0;
  std::uint64_t dataBytes_ = 0;
};

// Writes whole in-memory tensors (convenience over SafetensorsWriter).
void writeSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, HostTensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace stoker
