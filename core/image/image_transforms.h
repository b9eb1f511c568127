// image/image_transforms: the `transforms` knob, parsed. Names and arguments are torchvision's, so
// the same text becomes a real `transforms.Compose([...])` in the PyTorch export:
//
//   RandomResizedCrop(224[, scale=(0.08, 1.0)][, ratio=(0.75, 1.3333)]),RandomHorizontalFlip(0.5),Normalize(imagenet)
//   Resize(256),CenterCrop(224),Normalize(imagenet)
//   Resize((224, 224)),ToDtype(u8)
//
// Order: one geometry (RandomResizedCrop, or Resize and/or CenterCrop), then RandomHorizontalFlip,
// then ToDtype / Normalize. ToDtype(u8) gives HWC 0-255; f32 (the default), f16 and bf16 give CHW
// scaled to [0, 1] (ToTensor) before Normalize. The output size must be fixed (a batch is one
// tensor): a bare Resize(256) is refused with the fix in the message.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

enum class ImageDtype { U8, F32, F16, BF16 };
const char* imageDtypeName(ImageDtype d);

struct ImageTransforms {
  // RandomResizedCrop(size, scale, ratio)
  bool randomResizedCrop = false;
  double scaleMin = 0.08, scaleMax = 1.0;
  double ratioMin = 3.0 / 4.0, ratioMax = 4.0 / 3.0;
  // Resize(S) (shorter side to S) or Resize((h, w)); 0 = none
  int resizeShorter = 0;
  int resizeHeight = 0, resizeWidth = 0;
  // CenterCrop(size) or CenterCrop((h, w)); 0 = none
  int cropHeight = 0, cropWidth = 0;
  // RandomResizedCrop's size
  int rrcHeight = 0, rrcWidth = 0;
  double flipP = 0;  // RandomHorizontalFlip(p); 0 = none
  bool hasFlip = false;
  ImageDtype dtype = ImageDtype::F32;
  bool normalize = false;
  std::array<float, 3> mean{0, 0, 0}, std{1, 1, 1};
  bool imagenet = false;  // Normalize(imagenet)

  int outHeight = 0, outWidth = 0;  // fixed output size
  std::string text;                 // canonical form of the knob

  // [3, H, W] for floats, [H, W, 3] for u8
  std::vector<std::int64_t> sampleShape() const;
  std::int64_t sampleBytes() const;
  // The same pipeline as Python: "transforms.Compose([transforms.RandomResizedCrop(224), ...])".
  std::string torchvisionCompose() const;
};

// Parses the knob's text; throws Error(BadInput) with subject "transforms": "<which>: <why>".
ImageTransforms parseImageTransforms(const std::string& text);

}  // namespace stoker
