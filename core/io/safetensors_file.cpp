#include "io/safetensors_file.h"

#include "net/remote_object.h"
#include "util/error.h"

namespace stoker {

SafetensorsFile SafetensorsFile::open(const std::string& path, const PartOptions* parts) {
  SafetensorsFile f;
  // A URL: fetched whole (datasets); checkpoints are inspected by header (ckpt/inspect).
  f.map_ = mapOrFetch(path, parts ? *parts : PartOptions{});
  f.header_ = parseSafetensorsHeader(f.map_->data(), f.map_->size(), f.map_->size(), path);
  f.index_.reserve(f.header_.tensors.size());
  for (std::size_t i = 0; i < f.header_.tensors.size(); ++i)
    f.index_.emplace(f.header_.tensors[i].name, i);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  if (auto* e = find(name)) return *e;
  throwBadInput(path(), "no tensor named \"" + std::string(name) + "\"");
}

HostTensor SafetensorsFile::host(const SafetensorsEntry& e) const {
  HostTensor h;
  h.dtype = e.dtype;
  h.shape = e.shape;
  h.data = map_->data() + header_.dataStart() + e.begin;
  h.nbytes = e.nbytes();
  h.owner = map_;
  return h;
}

}  // namespace stoker
