// data/datasets/open_dataset: openDataset's table of dataset kinds. A new kind is one file in this
// folder and one row here.
#include <cstring>

#include "data/datasets/image_folder_dataset.h"
#include "data/datasets/synthetic_dataset.h"
#include "data/datasets/tensor_dataset.h"
#include "data/datasets/token_datasets.h"
#include "data/datasets/web_dataset.h"
#include "net/remote_url.h"
#include "util/error.h"

namespace stoker {
namespace {

using Opener = std::shared_ptr<Dataset> (*)(const std::string& spec, const LoaderOptions& options);

struct Kind {
  const char* prefix;  // "tokens:" (a spec starting with it), or ".npy" (a path ending in it)
  bool suffix;
  Opener open;
  const char* usage;
  Opener list = nullptr;  // openDatasetToList's, where it differs (image datasets without transforms)
  bool transforms = false;  // shaped by LoaderOptions::transforms (the image datasets); the others ignore them
};

std::shared_ptr<Dataset> openSynthetic(const std::string& spec, const LoaderOptions&) { return parseSyntheticSpec(spec); }

const Kind kKinds[] = {
    {"fashion-mnist", false, openFashionMnistDataset, "fashion-mnist[:DIR]  Debian's dataset-fashion-mnist (train split)"},
    {"synthetic:", false, openSynthetic, "synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]]  generated samples"},
    {"imagefolder:", false, openImageFolderDataset, "imagefolder:DIR  torchvision ImageFolder (JPEG, PNG, WebP, TIFF, BMP), with --transforms",
     listImageFolderDataset, true},
    {"wds:", false, openWebDataset, "wds:SHARDS[,shuffle=N]  WebDataset tar shards (DIR/x-{000..099}.tar or a glob), with --transforms",
     listWebDataset, true},
    {"tokens:", false, openTokensDataset, "tokens:FILE.bin[,dtype=u16|u32][,ctx=N]  nanoGPT token file"},
    {"megatron:", false, openMegatronDataset, "megatron:PREFIX[,ctx=N]  Megatron-LM PREFIX.idx + PREFIX.bin"},
    {".safetensors", true, openSafetensorsDataset, "FILE.safetensors  tensors sharing dim 0 become fields"},
    {".npy", true, openNpyDataset, "FILE.npy  one field, \"data\""},
};

bool matches(const Kind& k, const std::string& spec) {
  const std::size_t n = std::strlen(k.prefix);
  if (k.suffix) return spec.size() >= n && spec.compare(spec.size() - n, n, k.prefix) == 0;
  if (std::strcmp(k.prefix, "fashion-mnist") == 0) return spec == "fashion-mnist" || spec.rfind("fashion-mnist:", 0) == 0;
  return spec.rfind(k.prefix, 0) == 0;
}

// The kind a spec names; an unknown spec is refused with the list of kinds.
const Kind& kindOf(const std::string& spec) {
  for (const Kind& k : kKinds)
    if (matches(k, spec)) return k;
  std::string known;
  for (const Kind& k : kKinds) known += std::string("\n  ") + k.usage;
  throwBadInput("--dataset " + spec, "unknown dataset; known kinds:" + known);
}

}  // namespace

std::shared_ptr<Dataset> openDataset(const std::string& spec, const LoaderOptions& options) {
  validateLoaderOptions(options);
  return kindOf(spec).open(spec, options);  // its errors hide a URL's secrets themselves (util/error)
}

std::shared_ptr<Dataset> openDatasetToList(const std::string& spec, const LoaderOptions& options) {
  validateLoaderOptions(options);
  const Kind& k = kindOf(spec);
  return (k.list ? k.list : k.open)(spec, options);
}

bool datasetTakesTransforms(const std::string& spec) { return kindOf(spec).transforms; }

void refuseTransformsUnlessImages(const std::string& spec, const std::string& transforms, const std::string& subject) {
  if (!transforms.empty() && !datasetTakesTransforms(spec))
    throwBadInput(subject, "transforms apply to the datasets that decode images (imagefolder:, wds:); " + spec +
                               " is read as stored");
}

bool datasetIsRemote(const std::string& spec) {
  for (const Kind& k : kKinds)
    if (!k.suffix && spec.rfind(k.prefix, 0) == 0) return isRemotePath(spec.substr(std::strlen(k.prefix)));
  return isRemotePath(spec);
}

std::vector<std::string> datasetKinds() {
  std::vector<std::string> out;
  for (const Kind& k : kKinds) out.emplace_back(k.usage);
  return out;
}

}  // namespace stoker
