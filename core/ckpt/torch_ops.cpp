#include "ckpt/torch_ops.h"

#include "util/error.h"

// Defined by stoker_core (ckpt/torch_ops_impl.cpp), which every program linking it pulls in (its
// CMake target asks the linker for the symbol); weak here, so a torch-free program links without.
extern "C" const stoker::TorchCheckpointOps* stoker_torch_checkpoint_ops() __attribute__((weak));

namespace stoker {

const TorchCheckpointOps* torchCheckpointOps() {
  return stoker_torch_checkpoint_ops ? stoker_torch_checkpoint_ops() : nullptr;
}

const TorchCheckpointOps& requireTorchCheckpointOps(const std::string& what) {
  if (const auto* ops = torchCheckpointOps()) return *ops;
  throw Error(ErrorKind::Internal, what, "needs libtorch, which this program does not link");
}

}  // namespace stoker
