// ckpt/verify: are two checkpoints the same model, whatever their layouts?
// Same tensor names, dtypes, full shapes, and per-tensor XXH3-64 hashes of
// the logical (unsharded, row-major) bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/inspect.h"

namespace stoker {

class CancelToken;
class ProgressSink;

struct TensorDigest {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t hash = 0;
};

struct VerifyOptions {
  int jobs = 2;
  ProgressSink* progress = nullptr;
  const CancelToken* cancel = nullptr;
};

// Digests of every tensor, in name order. The source must be consistent.
std::vector<TensorDigest> digestCheckpoint(const CheckpointInfo& info, const VerifyOptions& options);

struct VerifyResult {
  bool equal = true;
  std::size_t tensorsCompared = 0;
  std::string tensor;  // the first differing tensor in name order
  std::string reason;  // why it differs
  // DCP's non-tensor items (step counters, RNG states, config) of either side: verify compares
  // tensors only, so these are said, not passed over in silence.
  std::size_t itemsNotCompared = 0;
};

VerifyResult verifyCheckpoints(const CheckpointInfo& a, const CheckpointInfo& b, const VerifyOptions& options);

}  // namespace stoker
