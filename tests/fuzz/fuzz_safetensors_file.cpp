// Fuzz target: a whole safetensors file, mapped, validated and every tensor read (bytes and,
// for dtypes libtorch has, a libtorch view).
#include "io/host_tensor_torch.h"
#include "fuzz_target.h"
#include "io/safetensors_file.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(safetensors_file) {
  const std::string path = stoker::fuzz::writeScratchFile("input.safetensors", data, size);
  const stoker::SafetensorsFile file = stoker::SafetensorsFile::open(path);
  for (const auto& e : file.tensors()) {
    const stoker::HostTensor t = file.host(e);
    check(t.nbytes == e.nbytes(), "host view has the entry's size");
    check(file.find(e.name) == &e, "every name finds its own entry");
    stoker::fuzz::checkHostTensor(t);
    if (stoker::torchSupports(t.dtype) && t.nbytes <= (1u << 20)) {
      const at::Tensor v = t.toTorch();
      check(static_cast<std::uint64_t>(v.numel()) == t.elementCount(), "libtorch view has every element");
    }
  }
}
