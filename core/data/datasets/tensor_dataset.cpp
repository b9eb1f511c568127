#include "data/datasets/tensor_dataset.h"
#include "data/datasets/byte_source.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "data/device.h"
#include "data/fashion_mnist.h"
#include "io/host_tensor.h"
#include "io/host_tensor_torch.h"
#include "io/npy_reader.h"
#include "io/safetensors_file.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

// reader_mode=read: copy the mapped bytes into process memory now, in
// part_size pieces, max_inflight_parts at a time, so epochs never fault pages.
at::Tensor readIntoMemory(const at::Tensor& mapped, const LoaderOptions& o) {
  at::Tensor owned = at::empty_like(mapped, at::MemoryFormat::Contiguous);
  const auto* src = static_cast<const std::uint8_t*>(mapped.data_ptr());
  auto* dst = static_cast<std::uint8_t*>(owned.data_ptr());
  const std::int64_t total = static_cast<std::int64_t>(mapped.nbytes());
  const std::int64_t parts = (total + o.part_size - 1) / o.part_size;
  std::atomic<std::int64_t> next{0};
  runJobs(static_cast<int>(std::min<std::int64_t>(o.max_inflight_parts, std::max<std::int64_t>(parts, 1))), [&] {
    for (std::int64_t p; (p = next.fetch_add(1)) < parts;) {
      const std::int64_t off = p * o.part_size;
      std::memcpy(dst + off, src + off, static_cast<std::size_t>(std::min(o.part_size, total - off)));
    }
  });
  return owned;
}

std::shared_ptr<Dataset> finish(const LoaderOptions& options, std::string desc, std::vector<std::string> names,
                                std::vector<at::Tensor> fields) {
  if (options.reader_mode == ReaderMode::Read)
    for (auto& f : fields) f = readIntoMemory(f, options);
  return std::make_shared<TensorDataset>(std::move(desc), std::move(names), std::move(fields));
}

}  // namespace

std::vector<FieldSpec> fieldSpecsOf(const std::string& description, const std::vector<std::string>& names,
                                    const std::vector<at::Tensor>& fields) {
  if (fields.empty() || names.size() != fields.size()) throwBadInput(description, "a dataset needs at least one field");
  const std::int64_t size = fields[0].dim() > 0 ? fields[0].size(0) : -1;
  if (size == 0) throwBadInput(description, "the dataset has no samples");  // before t[0] below
  std::vector<FieldSpec> specs;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const at::Tensor& t = fields[f];
    if (t.dim() == 0 || t.size(0) != size)
      throwBadInput(description + ": " + names[f],
                    "every field needs the same first dimension (" + std::to_string(size) + " samples), got shape " +
                        shapeText(t.sizes().vec()));
    FieldSpec spec;
    spec.name = names[f];
    spec.dtype = t.scalar_type();
    spec.sampleShape = t.sizes().slice(1).vec();
    spec.sampleBytes = static_cast<std::int64_t>(t[0].nbytes());  // a view's size: no device access
    specs.push_back(spec);
  }
  return specs;
}

TensorDataset::TensorDataset(std::string description, std::vector<std::string> names, std::vector<at::Tensor> fields,
                             std::vector<std::optional<ScaledBytes>> scaled)
    : description_(redactedUrl(description)), scaled_(std::move(scaled)) {
  specs_ = fieldSpecsOf(description_, names, fields);
  size_ = fields[0].size(0);
  for (const at::Tensor& t : fields) tensors_.push_back(t.is_contiguous() ? t : t.contiguous());
  if (!scaled_.empty() && scaled_.size() != tensors_.size())
    throwBadInput(description_, "scaled bytes for " + std::to_string(scaled_.size()) + " of " + std::to_string(tensors_.size()) + " fields");
  for (std::size_t f = 0; f < scaled_.size(); ++f) {
    if (!scaled_[f]) continue;
    at::Tensor& bytes = scaled_[f]->bytes;
    if (specs_[f].dtype != at::kFloat || bytes.scalar_type() != at::kByte || bytes.sizes() != tensors_[f].sizes())
      throwBadInput(description_ + ": " + names[f], "scaled bytes must be u8 of the float32 field's shape " +
                                                        shapeText(tensors_[f].sizes().vec()) + ", got shape " + shapeText(bytes.sizes().vec()));
    if (!bytes.is_contiguous()) bytes = bytes.contiguous();
  }
}

void TensorDataset::checkIndex(std::int64_t index) const {
  if (index < 0 || index >= size_)
    throwBadInput("sample " + std::to_string(index), "out of range for " + std::to_string(size_) + " samples");
}

void TensorDataset::readItem(std::int64_t index, std::uint8_t* const* dst) const {
  checkIndex(index);
  for (std::size_t f = 0; f < specs_.size(); ++f) {
    if (f < scaled_.size() && scaled_[f]) {
      gatherScaledHostRows(scaled_[f]->bytes, scaled_[f]->divisor, &index, 1, reinterpret_cast<float*>(dst[f]));
      continue;
    }
    const auto n = static_cast<std::size_t>(specs_[f].sampleBytes);
    std::memcpy(dst[f], static_cast<const std::uint8_t*>(tensors_[f].data_ptr()) + index * n, n);
  }
}

void TensorDataset::readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const {
  for (std::int64_t i = 0; i < count; ++i) checkIndex(indices[i]);
  // Field by field: one source stream at a time keeps the prefetcher on it.
  for (std::size_t f = 0; f < specs_.size(); ++f) {
    if (f < scaled_.size() && scaled_[f])
      gatherScaledHostRows(scaled_[f]->bytes, scaled_[f]->divisor, indices, count, reinterpret_cast<float*>(dst[f]));
    else
      gatherHostRows(tensors_[f], indices, count, dst[f]);
  }
}

std::shared_ptr<Dataset> openFashionMnistDataset(const std::string& spec, const LoaderOptions&) {
  const std::string dir = spec.size() > 14 ? spec.substr(14) : kFashionMnistDefaultDir;
  LabeledImages d = loadFashionMnist(dir, Split::Train);
  // The images are also kept as the file's bytes (a quarter of their float32 size): batches are
  // gathered from those and divided as they are copied.
  return std::make_shared<TensorDataset>("fashion-mnist (" + dir + ", train)", std::vector<std::string>{"images", "labels"},
                                         std::vector<at::Tensor>{d.images.toTorch(), d.labels.toTorch()},
                                         std::vector<std::optional<ScaledBytes>>{ScaledBytes{d.imageBytes.toTorch(), 255.0f}, std::nullopt});
}

std::shared_ptr<Dataset> openSafetensorsDataset(const std::string& spec, const LoaderOptions& options) {
  const PartOptions parts = partOptionsOf(options);  // a URL: fetched in parts, through cache_dir when set
  SafetensorsFile file = SafetensorsFile::open(spec, &parts);
  std::vector<std::string> names;
  std::vector<at::Tensor> fields;
  for (const auto& e : file.tensors()) {
    if (e.shape.empty()) throwBadInput(spec + ": " + e.name, "a scalar cannot be a dataset field (needs a sample dimension)");
    names.push_back(e.name);
    fields.push_back(file.host(e).toTorch());
  }
  if (fields.empty()) throwBadInput(spec, "holds no tensors");
  return finish(options, spec, names, fields);
}

std::shared_ptr<Dataset> openNpyDataset(const std::string& spec, const LoaderOptions& options) {
  const PartOptions parts = partOptionsOf(options);
  HostTensor t = readNpy(spec, &parts);
  if (t.shape.empty()) throwBadInput(spec, "a scalar array cannot be a dataset (needs a sample dimension)");
  return finish(options, spec, {"data"}, {t.toTorch()});
}

}  // namespace stoker
