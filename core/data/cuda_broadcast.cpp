// data/cuda_broadcast: a resident dataset replicated from one CUDA device to the other local ones
// by NCCL broadcast (flodl's replication), not by one host-to-device copy per GPU. libtorch's
// torch::cuda::nccl keeps one communicator per device set, so the local devices share one.
// Compiled against a CUDA libtorch only (the CUDA syntax check compiles it elsewhere).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/cuda/nccl.h>

#include "data/device.h"

namespace stoker {

ResidentReplicas broadcastResident(const std::vector<at::Tensor>& fields,
                                   const std::vector<std::shared_ptr<DeviceBackend>>& targets) {
  ResidentReplicas out;
  if (fields.empty() || targets.empty()) {
    out.why = "nothing to replicate";
    return out;
  }
  const at::Device source = fields.front().device();
  for (const auto& t : targets) {
    if (t->kind() != DeviceKind::Cuda || !source.is_cuda() || t->torchDevice() == source) {
      out.why = "NCCL broadcast needs the dataset on one CUDA device and other CUDA devices to send it to";
      return out;
    }
  }
  std::vector<std::vector<at::Tensor>> replicas(targets.size());
  try {
    for (const at::Tensor& field : fields) {
      std::vector<at::Tensor> set{field.contiguous()};  // the root first
      for (std::size_t t = 0; t < targets.size(); ++t) {
        c10::cuda::CUDAGuard guard(targets[t]->torchDevice().index());
        set.push_back(at::empty_like(set.front(), set.front().options().device(targets[t]->torchDevice())));
      }
      torch::cuda::nccl::broadcast(set);
      for (std::size_t t = 0; t < targets.size(); ++t) replicas[t].push_back(set[t + 1]);
    }
    // The replicas are read by other threads' streams from now on: the broadcast must be done.
    for (std::size_t t = 0; t <= targets.size(); ++t) {
      const at::Device d = t == 0 ? source : targets[t - 1]->torchDevice();
      c10::cuda::CUDAGuard guard(d.index());
      at::cuda::getCurrentCUDAStream(d.index()).synchronize();
    }
  } catch (const c10::Error& e) {  // out of memory on a target, or a libtorch built without NCCL
    out.why = std::string("NCCL broadcast failed: ") + e.what_without_backtrace();
    return out;
  } catch (const std::exception& e) {  // torch::cuda::nccl reports NCCL's own errors as runtime_error
    out.why = std::string("NCCL broadcast failed: ") + e.what();
    return out;
  }
  out.perTarget = std::move(replicas);
  return out;
}

}  // namespace stoker
