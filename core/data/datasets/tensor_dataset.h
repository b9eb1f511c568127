// data/datasets/tensor_dataset: fields already in host memory (decoded arrays or file mappings)
// sharing dim 0 -- Fashion-MNIST, .safetensors, .npy. Resident mode gathers from them directly.
#pragma once

#include "data/dataset.h"

namespace stoker {

class TensorDataset : public Dataset {
 public:
  // `scaled`: per field, the bytes it was made from (ScaledBytes; empty or nullopt where none).
  // Throws Error(BadInput) when a field's bytes are not u8 of its shape, or the field not float32.
  TensorDataset(std::string description, std::vector<std::string> names, std::vector<at::Tensor> fields,
                std::vector<std::optional<ScaledBytes>> scaled = {});
  std::string description() const override { return description_; }
  std::int64_t size() const override { return size_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  void readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const override;
  std::vector<at::Tensor> hostFields() const override { return tensors_; }
  std::vector<std::optional<ScaledBytes>> scaledFields() const override { return scaled_; }

 private:
  void checkIndex(std::int64_t index) const;
  std::string description_;
  std::int64_t size_ = 0;
  std::vector<FieldSpec> specs_;
  std::vector<at::Tensor> tensors_;
  std::vector<std::optional<ScaledBytes>> scaled_;  // empty, or one per field
};

// The fields of tensors sharing dim 0 (at least one sample); Error(BadInput) naming the field whose
// first dimension differs. Reads only shapes and dtypes, so the tensors may lie on any device.
std::vector<FieldSpec> fieldSpecsOf(const std::string& description, const std::vector<std::string>& names,
                                    const std::vector<at::Tensor>& fields);

// The openers of the kinds held as tensors (see data/datasets/open_dataset.cpp).
std::shared_ptr<Dataset> openFashionMnistDataset(const std::string& spec, const LoaderOptions& options);
std::shared_ptr<Dataset> openSafetensorsDataset(const std::string& spec, const LoaderOptions& options);
std::shared_ptr<Dataset> openNpyDataset(const std::string& spec, const LoaderOptions& options);

}  // namespace stoker
