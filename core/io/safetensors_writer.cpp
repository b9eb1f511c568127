#include "io/safetensors_writer.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors_header.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace stoker {
namespace {

std::string jsonString(const std::string& s, const std::string& what) {
  if (!isValidUtf8(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()))
    throwBadInput(what, "is not valid UTF-8");
  return nlohmann::json(s).dump();
}

}  // namespace

std::uint64_t SafetensorsLayout::fileSize() const {
  std::uint64_t data = order.empty() ? 0 : offsets.back() + sizes.back();
  return 8 + header.size() + data;
}

SafetensorsLayout planSafetensorsLayout(std::vector<TensorSpec> tensors,
                                        const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throwBadInput("tensor name \"__metadata__\"", "is reserved");
    if (!seen.insert(t.name).second) throwBadInput("tensor \"" + t.name + "\"", "appears twice");
  }
  // Official order: descending dtype (alignment), then name.
  std::sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    if (a.dtype != b.dtype) return a.dtype > b.dtype;
    return a.name < b.name;
  });

  SafetensorsLayout layout;
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      json += jsonString(k, "metadata key") + ":" + jsonString(v, "metadata value");
    }
    json += "}";
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::uint64_t elements = 1;
    for (auto d : t.shape) {
      if (d < 0) throwBadInput("tensor \"" + t.name + "\"", "has a negative dimension");
      if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements))
        throwBadInput("tensor \"" + t.name + "\"", "shape overflows");
    }
    auto bytes = dtypeBytesFor(t.dtype, elements);
    if (!bytes) throwBadInput("tensor \"" + t.name + "\"", "size overflows or is not whole bytes");
    if (json.size() > 1) json += ',';
    json += jsonString(t.name, "tensor name") + ":{\"dtype\":\"" + std::string(dtypeName(t.dtype)) +
            "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i)
      json += (i ? "," : "") + std::to_string(t.shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(offset + *bytes) + "]}";
    layout.offsets.push_back(offset);
    layout.sizes.push_back(*bytes);
    layout.order.push_back(t);
    offset += *bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-aligned
  if (json.size() > kSafetensorsMaxHeaderBytes)
    throwBadInput("safetensors header", "would exceed the 100,000,000-byte limit");
  layout.header = std::move(json);
  return layout;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), layout_(planSafetensorsLayout(std::move(tensors), metadata)) {
  dataBytes_ = layout_.fileSize() - 8 - layout_.header.size();
  for (std::size_t i = 0; i < layout_.order.size(); ++i) index_.emplace(layout_.order[i].name, i);
  out_ = std::make_unique<AtomicFile>(path_);
  std::uint8_t len[8];
  std::uint64_t n = layout_.header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(n >> (8 * i));
  out_->write(len, 8);
  out_->write(layout_.header.data(), layout_.header.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::append(const void* data, std::size_t n) {
  if (written_ + n > dataBytes_)
    throw Error(ErrorKind::Internal, path_, "more tensor bytes than the header declares");
  out_->write(data, n);
  written_ += n;
}

void SafetensorsWriter::appendFrom(int fd, std::uint64_t offset, std::uint64_t n, const std::string& source) {
  if (written_ + n > dataBytes_)
    throw Error(ErrorKind::Internal, path_, "more tensor bytes than the header declares");
  out_->copyFrom(fd, offset, n, source);
  written_ += n;
}

void SafetensorsWriter::write(const std::string& name, const void* data, std::size_t n) {
  auto it = index_.find(name);
  if (it == index_.end())
    throw Error(ErrorKind::Internal, path_, "tensor \"" + name + "\" is not in the header");
  std::size_t i = it->second;
  if (layout_.offsets[i] != written_ || layout_.sizes[i] != n)
    throw Error(ErrorKind::Internal, path_,
                "tensor \"" + name + "\" written out of order or with the wrong size");
  append(data, n);
}

void SafetensorsWriter::finish() {
  if (written_ != dataBytes_)
    throw Error(ErrorKind::Internal, path_,
                "finished after " + std::to_string(written_) + " of " +
                    std::to_string(dataBytes_) + " tensor bytes");
  out_->commit();
}

void writeSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, HostTensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  std::map<std::string, const HostTensor*> byName;
  for (const auto& [name, t] : tensors) {
    specs.push_back({name, t.dtype, t.shape});
    byName[name] = &t;
  }
  SafetensorsWriter writer(path, std::move(specs), metadata);
  for (const auto& spec : writer.writeOrder()) {
    const HostTensor& t = *byName.at(spec.name);
    writer.write(spec.name, t.data, t.nbytes);
  }
  writer.finish();
}

}  // namespace stoker
