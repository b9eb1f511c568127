// The libtorch operations of the checkpoint engine (ckpt/torch_ops.h), provided by stoker_core.
#include "ckpt/dtype_convert.h"
#include "ckpt/torch_ops.h"
#include "io/pt_file.h"

extern "C" const stoker::TorchCheckpointOps* stoker_torch_checkpoint_ops() {
  static const stoker::TorchCheckpointOps ops{&stoker::convertFloats, &stoker::writePtStreaming,
                                              &stoker::writeTensorZip};
  return &ops;
}
