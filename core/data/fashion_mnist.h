// data/fashion_mnist: the Fashion-MNIST dataset as Debian's
// dataset-fashion-mnist package installs it (IDX, gzip). Images are float32
// [N,1,28,28] scaled to [0,1], labels int64 [N], as the loader serves them.
#pragma once

#include <string>

#include "io/host_tensor.h"

namespace stoker {

inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

enum class Split { Train, Test };

struct LabeledImages {
  HostTensor images;  // F32 [N,1,28,28]
  HostTensor imageBytes;  // U8 [N,1,28,28]: the file's pixels, images = imageBytes / 255
  HostTensor labels;  // I64 [N]
};

// Throws Error(BadInput) if the files are missing (naming the Debian package)
// or their shapes disagree.
LabeledImages loadFashionMnist(const std::string& dir, Split split);

}  // namespace stoker
