// data/datasets/image_dataset: what every dataset of encoded images shares (imagefolder, and
// WebDataset next): fields `images` (the transforms' output) and `labels` (int64), and a read that
// fetches the bytes (subclass), decodes and transforms them into the batch slot
// (image/image_pipeline) and times both stages.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "data/dataset.h"
#include "image/image_pipeline.h"
#include "image/jpeg_scan_index.h"

namespace stoker {

class EncodedImageDataset : public Dataset {
 public:
  // Empty `transforms` opens the dataset to list it only (openDatasetToList): `images` has no fixed
  // shape (empty, 0 bytes) and reading a sample is refused with the "need transforms" error.
  EncodedImageDataset(std::string description, const std::string& transforms);
  std::string description() const override {
    return description_ + ", " + (listOnly_ ? std::string("no transforms") : pipeline_.transforms().text);
  }
  bool listOnly() const { return listOnly_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  int parallelReads() const override { return parallelFetches_; }
  void readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                   const ReadContext& context) const override;
  ResidentAdvice residentAdvice() const override;
  // The images field when its dtype is a float: the pipeline's u8 planes and tables.
  std::vector<std::optional<ByteExpansion>> byteExpansions() const override;
  const ImagePipeline& pipeline() const { return pipeline_; }
  // The JPEG scan index's budget (read from STOKER_JPEG_SCAN_INDEX_MB when the dataset opens) and
  // the bytes its indexes hold now.
  std::size_t scanIndexBudget() const { return indexBudget_; }
  std::size_t scanIndexBytes() const;

 protected:
  // Sample `index`'s encoded bytes into `bytes` (resized as needed), its label, and a name for
  // errors; `epoch` is the epoch the loader reads it for.
  virtual void fetch(std::int64_t index, std::int64_t epoch, std::vector<std::uint8_t>& bytes, std::int64_t& label,
                     std::string& name) const = 0;
  // Remote samples (s3://, http(s)://): a batch's bytes are fetched this many at once before
  // they are decoded (one request each is latency-bound); 1 fetches them one by one.
  int parallelFetches_ = 1;

 private:
  std::string description_;
  bool listOnly_;
  ImagePipeline pipeline_;
  std::vector<FieldSpec> specs_;
  std::size_t indexBudget_;  // STOKER_JPEG_SCAN_INDEX_MB, read when the dataset opens
  // Each sample's JPEG scan index, made on its first read (the dataset's size is known by then).
  mutable std::once_flag indexOnce_;
  mutable std::unique_ptr<JpegIndexCache> index_;
  mutable std::atomic<const JpegIndexCache*> indexMade_{nullptr};  // index_, once made (scanIndexBytes)
};

}  // namespace stoker
