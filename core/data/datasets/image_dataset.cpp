#include "data/datasets/image_dataset.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "net/remote_url.h"
#include "util/error.h"
#include "util/job_threads.h"
#include "util/monotonic_seconds.h"

namespace stoker {
namespace {

c10::ScalarType scalarType(ImageDtype d) {
  switch (d) {
    case ImageDtype::U8: return c10::ScalarType::Byte;
    case ImageDtype::F16: return c10::ScalarType::Half;
    case ImageDtype::BF16: return c10::ScalarType::BFloat16;
    case ImageDtype::F32: break;
  }
  return c10::ScalarType::Float;
}


}  // namespace

EncodedImageDataset::EncodedImageDataset(std::string description, const std::string& transforms)
    : description_(redactedUrl(description)),  // shown in logs and notes: no password of a URL
      listOnly_(transforms.find_first_not_of(" \t\n") == std::string::npos),
      pipeline_(listOnly_ ? ImageTransforms{} : parseImageTransforms(transforms)),
      indexBudget_(JpegIndexCache::defaultBudget()) {
  const ImageTransforms& t = pipeline_.transforms();
  specs_ = {listOnly_ ? FieldSpec{"images", c10::ScalarType::Byte, {}, 0}
                      : FieldSpec{"images", scalarType(t.dtype), t.sampleShape(), t.sampleBytes()},
            FieldSpec{"labels", c10::ScalarType::Long, {}, 8}};
}

std::size_t EncodedImageDataset::scanIndexBytes() const {
  const JpegIndexCache* index = indexMade_.load(std::memory_order_acquire);  // none before the first read
  return index ? index->bytes() : 0;
}

Dataset::ResidentAdvice EncodedImageDataset::residentAdvice() const {
  const ImageTransforms& t = pipeline_.transforms();
  if (t.randomResizedCrop || (t.hasFlip && t.flipP > 0))
    return {true, true, "the transforms draw per epoch (" + t.text + "): a resident copy would freeze one draw"};
  return {true, false, "images are decoded as they are read; resident would decode the whole dataset first"};
}

std::vector<std::optional<ByteExpansion>> EncodedImageDataset::byteExpansions() const {
  if (listOnly_ || pipeline_.transforms().dtype == ImageDtype::U8) return {};
  return {pipeline_.byteExpansion(), std::nullopt};
}

void EncodedImageDataset::readItem(std::int64_t index, std::uint8_t* const* dst) const {
  readSamples(&index, 1, dst, ReadContext{});
}

void EncodedImageDataset::readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                                      const ReadContext& context) const {
  if (listOnly_) parseImageTransforms("");  // throws: opened to list, not to read
  std::call_once(indexOnce_, [this] {
    index_ = std::make_unique<JpegIndexCache>(size(), indexBudget_);
    indexMade_.store(index_.get(), std::memory_order_release);
  });
  thread_local std::vector<std::uint8_t> bytes;
  thread_local std::string name;
  const ImageTransforms& t = pipeline_.transforms();
  const bool asBytes = context.bytesForDevice && t.dtype != ImageDtype::U8;  // byteExpansions()' planes
  const std::int64_t imageBytes =
      asBytes ? std::int64_t{kExpandChannels} * t.outHeight * t.outWidth : specs_[0].sampleBytes;
  for (std::int64_t i = 0; i < count; ++i)
    if (indices[i] < 0 || indices[i] >= size())
      throwBadInput("sample " + std::to_string(indices[i]), "out of range for " + std::to_string(size()) + " samples");
  // Remote bytes: the batch's samples fetched parallelFetches_ at a time, in order, each decoded
  // as soon as it has arrived while later ones download (at 50 ms a batch of 64, 16 in flight,
  // waited four round trips before its first decode); a failed fetch is kept and thrown at its
  // sample, so skip_bad_samples sees the same order of errors.
  struct Fetched {
    std::vector<std::uint8_t> bytes;
    std::int64_t label = 0;
    std::string name;
    std::exception_ptr error;
  };
  // Kept between batches with their buffers, so a batch's bytes land in pages already faulted in.
  thread_local std::vector<Fetched> keptFetched;
  std::vector<Fetched>& fetched = keptFetched;  // a name the helpers' lambda captures: theirs would be their own
  auto decode = [&](std::int64_t i, const std::uint8_t* data, std::size_t n, const std::string& sampleName, std::int64_t label) {
    ImageStageSeconds seconds;
    pipeline_.run(data, n, sampleName, SampleSeed{context.seed, context.epoch, indices[i]}, dst[0] + i * imageBytes,
                  context.stages ? &seconds : nullptr, JpegIndexSlot{index_.get(), indices[i]}, asBytes);
    if (context.stages) {
      context.stages->decode += seconds.decode;
      context.stages->transform += seconds.transform;
    }
    std::memcpy(dst[1] + i * 8, &label, 8);
  };
  if (parallelFetches_ > 1 && count > 1) {
    if (fetched.size() < static_cast<std::size_t>(count)) fetched.resize(static_cast<std::size_t>(count));
    forEachFetchedInOrder(
        count, parallelFetches_,
        [&](std::int64_t i) {
          Fetched& f = fetched[static_cast<std::size_t>(i)];
          f.error = nullptr;
          try {
            fetch(indices[i], context.epoch, f.bytes, f.label, f.name);
          } catch (...) {
            f.error = std::current_exception();  // thrown at its sample, in order
          }
        },
        [&](std::int64_t i) {
          try {
            Fetched& f = fetched[static_cast<std::size_t>(i)];
            if (f.error) std::rethrow_exception(f.error);
            decode(i, f.bytes.data(), f.bytes.size(), f.name, f.label);
          } catch (...) {
            rethrowForSample(indices[i]);
          }
        },
        context.stages ? &context.stages->read : nullptr);
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      std::int64_t label = 0;
      const double t0 = context.stages ? monotonicSeconds() : 0;
      fetch(indices[i], context.epoch, bytes, label, name);
      if (context.stages) context.stages->read += monotonicSeconds() - t0;
      decode(i, bytes.data(), bytes.size(), name, label);
    } catch (...) {
      rethrowForSample(indices[i]);
    }
  }
}

}  // namespace stoker
