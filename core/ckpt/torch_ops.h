// ckpt/torch_ops: what the checkpoint engine needs libtorch for -- dtype
// conversion (torch's own rounding), writing .pt files and DCP items (torch's
// zip writer). The engine itself is torch-free (stoker_bytes), so the `stoker`
// front end starts in milliseconds for inspect, verify and byte-moving
// conversions; the libtorch half of the core (stoker_core) provides these
// operations, and a program that links it has them. Without them, callers get
// Error(Internal) naming what needed libtorch (front ends check first:
// the CLI hands such commands to stoker-torch).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ckpt/dtype_convert.h"
#include "io/host_tensor.h"

namespace stoker {

struct TensorSpec;

struct TorchCheckpointOps {
  void (*convertFloats)(const void* in, Dtype from, Dtype to, std::size_t count, std::vector<std::uint8_t>& out,
                        F16Overflow* overflow);
  void (*writePtStreaming)(const std::string& path, const std::vector<TensorSpec>& specs,
                           const std::function<HostTensor(std::size_t)>& produce);
  std::uint64_t (*writeTensorZip)(const std::function<void(const void*, std::size_t)>& sink, const TensorSpec& spec,
                                  const HostTensor& t, const std::string& subject);
};

// What a torch-free front end throws when a command needs these operations: it then hands the
// command to the libtorch front end before anything was written.
struct NeedsLibtorch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The operations when libtorch is linked into this program, else nullptr.
const TorchCheckpointOps* torchCheckpointOps();
// The operations, or Error(Internal) saying that `what` needs libtorch.
const TorchCheckpointOps& requireTorchCheckpointOps(const std::string& what);

}  // namespace stoker
