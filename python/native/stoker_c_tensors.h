// stoker_c_tensors.h: the one C++ entry of libstoker_c, for the CPython extension stoker._batches
// (python/native/batches_module.cpp). It hands a batch over as the core's own at::Tensors, which
// the extension wraps with THPVariable_Wrap: no DLPack export, capsule, ctypes call or from_dlpack
// per batch (together ~5 us of the Python consumer's ~10 us a batch on 2 cores). Both sides are
// built in one tree against one libtorch, so at::Tensor crosses with its C++ ABI; the extension
// finds this function through ctypes (its address), not by linking libstoker_c.
#pragma once

#include <ATen/core/Tensor.h>

#include "stoker_c.h"

extern "C" {

/* As stoker_epoch_next, but the fields are moved into out[0..n) as tensors (under reuse_buffers,
 * views that hold the pooled block's lease). */
STOKER_C_API int stoker_epoch_next_tensors(StokerEpoch* epoch, int wait_ms, at::Tensor* out, int capacity);
typedef int (*stoker_epoch_next_tensors_fn)(StokerEpoch*, int, at::Tensor*, int);

}  // extern "C"
