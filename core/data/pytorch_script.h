// data/pytorch_script: the workbench's "PyTorch…" export as a script that runs as pasted --
// exportPyTorchSnippet's DataLoader with `dataset` defined for the dataset spec, and the copy
// knobs off where nothing is copied (cpu). Implemented in loader_export.cpp.
#pragma once

#include <string>

namespace stoker {

struct LoaderOptions;

// The whole PyTorch script for `spec` on `device`: `dataset` is Fashion-MNIST read from Debian's
// files as Stoker reads them (float32 / 255), an ImageFolder with the transforms, tensor files,
// or a synthetic stand-in of the same count and shape; token and WebDataset specs raise
// NotImplementedError naming the stoker export (PyTorch has no reader for them). On cpu,
// pin_memory and non_blocking are off. Throws what validateLoaderOptions throws.
std::string exportPyTorchScript(const LoaderOptions& o, const std::string& spec, const std::string& device,
                                const std::string& weightsFile = "weights.json");
// The Python lines that define `dataset` for `spec`.
std::string pytorchDatasetDefinition(const std::string& spec, const LoaderOptions& o);

}  // namespace stoker
