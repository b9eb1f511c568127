// io/safetensors_file: a validated, memory-mapped safetensors file. Tensors are
// views into the mapping (no copy); the mapping lives as long as any view.
#pragma once


#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "io/host_tensor.h"
#include "io/safetensors_header.h"
#include "util/mapped_file.h"

namespace stoker {

struct PartOptions;

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws Error(BadInput) naming the file and the
  // first rule broken, Error(Io) if it cannot be read. A URL is fetched whole,
  // in `parts` (through their cache when they have one).
  static SafetensorsFile open(const std::string& path, const PartOptions* parts = nullptr);

  const std::string& path() const { return map_->path(); }
  std::uint64_t fileSize() const { return map_->size(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsEntry>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  const SafetensorsEntry* find(std::string_view name) const;
  const SafetensorsEntry& entry(std::string_view name) const;  // throws if absent

  // The raw bytes of a tensor, for every dtype.
  HostTensor host(const SafetensorsEntry& e) const;
  HostTensor host(std::string_view name) const { return host(entry(name)); }
  // A libtorch tensor over the mapping (see HostTensor::toTorch).
  at::Tensor tensor(std::string_view name) const;  // io/host_tensor_torch.cpp

 private:
  std::shared_ptr<const MappedFile> map_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace stoker
