#include "data/fashion_mnist.h"

#include <filesystem>
#include <vector>

#include "io/idx_reader.h"
#include "util/error.h"

namespace stoker {
namespace {

std::string findFile(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {".gz", ""}) {
    std::string p = dir + "/" + stem + suffix;
    if (std::filesystem::exists(p)) return p;
  }
  throwBadInput(dir, "no " + stem + "[.gz] (install Debian's dataset-fashion-mnist package)");
}

}  // namespace

LabeledImages loadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string imagesPath = findFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labelsPath = findFile(dir, prefix + "-labels-idx1-ubyte");
  HostTensor raw = readIdx(imagesPath);
  HostTensor rawLabels = readIdx(labelsPath);
  if (raw.dtype != Dtype::U8 || raw.shape.size() != 3)
    throwBadInput(imagesPath, "expected uint8 images [N,H,W]");
  if (rawLabels.dtype != Dtype::U8 || rawLabels.shape.size() != 1 || rawLabels.shape[0] != raw.shape[0])
    throwBadInput(labelsPath, "expected one uint8 label per image");

  const std::uint64_t n = raw.elementCount();
  auto pixels = std::make_shared<std::vector<float>>(n);
  for (std::uint64_t i = 0; i < n; ++i) (*pixels)[i] = static_cast<float>(raw.data[i]) / 255.0f;  // as torchvision's ToTensor: bit for bit
  auto labels = std::make_shared<std::vector<std::int64_t>>(rawLabels.data, rawLabels.data + rawLabels.nbytes);

  LabeledImages out;
  out.images.dtype = Dtype::F32;
  out.images.shape = {raw.shape[0], 1, raw.shape[1], raw.shape[2]};
  out.images.data = reinterpret_cast<const std::uint8_t*>(pixels->data());
  out.images.nbytes = n * sizeof(float);
  out.images.owner = pixels;
  out.imageBytes = raw;
  out.imageBytes.shape = out.images.shape;
  out.labels.dtype = Dtype::I64;
  out.labels.shape = {rawLabels.shape[0]};
  out.labels.data = reinterpret_cast<const std::uint8_t*>(labels->data());
  out.labels.nbytes = labels->size() * sizeof(std::int64_t);
  out.labels.owner = labels;
  return out;
}

}  // namespace stoker
