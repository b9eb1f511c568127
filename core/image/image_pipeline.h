// image/image_pipeline: one encoded image in, one transformed sample out, written straight into
// the batch's staging block. The plan comes first, from the header alone: which source box the
// geometry reads (RandomResizedCrop's draw, or the whole image), how big it is resized, which
// window of the resize is kept (CenterCrop, padded with zeros past the edges like torchvision).
// Then only what the window needs is decoded: the rows and columns its filter taps reach, at the
// smallest JPEG DCT scale (1/2, 1/4, 1/8) that still leaves the source at least as large as the
// resize (a reduction either way, so no detail the output could show is lost). Resizing is
// Pillow's (image/resample), into channel planes with the flip applied on the way
// (image/resample_planar); ToTensor + Normalize give torchvision's float32 values exactly
// (image/to_tensor).
//
// Random choices come from (seed, epoch, sample), not from the thread that does the work.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "image/byte_expansion.h"
#include "image/image_decoder.h"
#include "image/image_transforms.h"
#include "image/to_tensor.h"

namespace stoker {

// Seconds spent per stage, added to by run().
struct ImageStageSeconds {
  double decode = 0, transform = 0;
};

// Where a sample's randomness comes from.
struct SampleSeed {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t sample = 0;
};

// What the plan decided for one image (exposed for tests and `stoker dataset info`).
struct ImagePlan {
  double box[4] = {0, 0, 0, 0};   // source box x0, y0, x1, y1 (RandomResizedCrop's crop, or the image)
  int resizedWidth = 0, resizedHeight = 0;
  int windowX = 0, windowY = 0;   // the kept window's top-left in the resized image (may be < 0: padding)
  bool flip = false;
  int scaleDenom = 1;             // the JPEG DCT scale decoded at
};

class ImagePipeline {
 public:
  explicit ImagePipeline(ImageTransforms transforms);
  const ImageTransforms& transforms() const { return t_; }

  // The plan for an image of `width` x `height` (scaleDenom left at 1: the decoder decides it).
  ImagePlan plan(int width, int height, const SampleSeed& seed) const;
  // Decodes `data` (named `name` in errors) and writes transforms().sampleBytes() to `dst`, or with
  // `planarBytes` the image before ToDtype / Normalize as three u8 planes (CHW,
  // byteExpansion().bytesPerSample()) for the device to widen. Returns the plan it followed, with
  // the DCT scale it decoded at. `index`: where the image's JPEG scan index is kept between epochs
  // (image/jpeg_scan_index), if anywhere.
  ImagePlan run(const std::uint8_t* data, std::size_t size, const std::string& name, const SampleSeed& seed, std::uint8_t* dst,
           ImageStageSeconds* seconds = nullptr, JpegIndexSlot index = {}, bool planarBytes = false) const;
  // The tables that widen planarBytes output into what run() writes otherwise (float dtypes only:
  // a u8 output has nothing to widen).
  ByteExpansion byteExpansion() const;

 private:
  ImageTransforms t_;
  std::array<PlaneToFloat, 3> toFloat_;                    // u8 -> ToTensor (+ Normalize), float32
  std::array<std::array<std::uint16_t, 256>, 3> lut16_{};  // the same as f16 or bf16 bits
};

}  // namespace stoker
