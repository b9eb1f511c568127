// data/dataset: what the loader reads samples from. A dataset has N samples,
// each made of named fields of fixed dtype and shape (images, labels ...).
// Two ways in: per item (readItem, one sample into one slot per field) and
// per batch (readBatch, many samples into contiguous batch buffers; the
// default loops over readItem). Datasets already in host memory also expose
// their whole fields (hostFields) so resident mode can gather from them
// without reading item by item.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader_options.h"

namespace stoker {

struct FieldSpec {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<std::int64_t> sampleShape;  // without the batch dimension
  std::int64_t sampleBytes = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string description() const = 0;
  virtual std::int64_t size() const = 0;
  virtual const std::vector<FieldSpec>& fields() const = 0;
  // Writes sample `index` to dst[f] (fields()[f].sampleBytes each). May throw;
  // the loader reports the error with the sample index.
  virtual void readItem(std::int64_t index, std::uint8_t* const* dst) const = 0;
  // Writes samples indices[0..count) to dst[f] one after another. Errors name
  // the sample that failed.
  virtual void readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const;
  // Every field as one contiguous CPU tensor [N, ...] when the dataset is in
  // host memory already; empty when samples are produced on demand.
  virtual std::vector<at::Tensor> hostFields() const { return {}; }

  std::int64_t sampleBytes() const;  // all fields of one sample
  std::int64_t totalBytes() const { return sampleBytes() * size(); }
};

// Fields held in host memory (decoded arrays or file mappings), sharing dim 0.
class TensorDataset : public Dataset {
 public:
  TensorDataset(std::string description, std::vector<std::string> names, std::vector<at::Tensor> fields);
  std::string description() const override { return description_; }
  std::int64_t size() const override { return size_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  void readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const override;
  std::vector<at::Tensor> hostFields() const override { return tensors_; }

 private:
  void checkIndex(std::int64_t index) const;
  std::string description_;
  std::int64_t size_ = 0;
  std::vector<FieldSpec> specs_;
  std::vector<at::Tensor> tensors_;
};

// synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]]: N samples of SHAPE (e.g.
// 3x32x32) with content derived from the index, plus an int64 label (index %
// 10). cost_us of busy CPU work per sample stands in for decoding; wait_us of
// sleep per sample for storage latency (a network file system, an object
// store), which frees the core, so more readers than cores still help.
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(std::int64_t n, std::vector<std::int64_t> shape, c10::ScalarType dtype, double costMicros,
                   double waitMicros = 0);
  std::string description() const override;
  std::int64_t size() const override { return n_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  double costMicros() const { return costMicros_; }
  double waitMicros() const { return waitMicros_; }

 private:
  std::int64_t n_;
  double costMicros_;
  double waitMicros_;
  std::vector<FieldSpec> specs_;
};

// Parses "synthetic:..." (throws Error(BadInput) naming the part that is wrong).
std::shared_ptr<SyntheticDataset> parseSyntheticSpec(const std::string& spec);

// A dataset by the names `stoker bench --dataset` accepts:
//   fashion-mnist[:DIR]   Debian's dataset-fashion-mnist (train split)
//   synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]]
//   PATH.safetensors      tensors sharing dim 0 become fields
//   PATH.npy              one field, "data"
// reader_mode/part_size/max_inflight_parts decide how files reach memory.
std::shared_ptr<Dataset> openDataset(const std::string& spec, const LoaderOptions& options = {});

}  // namespace stoker
