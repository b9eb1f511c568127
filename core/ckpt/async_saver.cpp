#include "io/host_tensor_torch.h"
#include "ckpt/async_saver.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <set>

#include "io/host_tensor.h"
#include "io/safetensors_writer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace stoker {
namespace fs = std::filesystem;

void SaveFuture::wait() const {
  if (!f_.valid()) throw Error(ErrorKind::BadInput, "async checkpoint", "no save was started");
  f_.get();
}

bool SaveFuture::isDone() const {
  return !f_.valid() || f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

AsyncCheckpointer::AsyncCheckpointer(std::string dir, int rank, int worldSize, ShardSpecs specs)
    : dir_(std::move(dir)), rank_(rank), worldSize_(worldSize), specs_(std::move(specs)) {
  if (worldSize_ < 1) throwBadInput("async checkpoint", "world size must be at least 1");
  if (rank_ < 0 || rank_ >= worldSize_)
    throwBadInput("async checkpoint", "rank " + std::to_string(rank_) + " is not below world size " +
                                          std::to_string(worldSize_));
  for (const auto& [name, s] : specs_) {
    if (!s.shardDim) continue;
    if (*s.shardDim < 0 || *s.shardDim >= static_cast<int>(s.fullShape.size()))
      throwBadInput("async checkpoint", "tensor \"" + name + "\": shard_dim is not a dimension");
    std::int64_t sum = 0;
    for (auto x : s.shardSizes) sum += x;
    if (s.shardSizes.size() != static_cast<std::size_t>(worldSize_) || sum != s.fullShape[*s.shardDim])
      throwBadInput("async checkpoint", "tensor \"" + name + "\": shard_sizes must have " +
                                            std::to_string(worldSize_) + " entries summing to the full dimension");
  }
}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (inFlight_.valid()) {
    try {
      inFlight_.wait();
    } catch (...) {
      // The caller never asked; the temporary file is already gone.
    }
  }
}

SaveFuture AsyncCheckpointer::save(const std::vector<std::pair<std::string, at::Tensor>>& stateDict, std::int64_t step) {
  if (inFlight_.valid() && !inFlight_.isDone())
    throwBadInput("async checkpoint", "a save is already in flight; wait() for it before starting another");
  if (step < 0) throwBadInput("async checkpoint", "step must be 0 or more (got " + std::to_string(step) + ")");

  std::set<std::string> seen;
  for (const auto& [name, t] : stateDict) {
    auto spec = specs_.find(name);
    if (spec == specs_.end()) throwBadInput("async checkpoint", "tensor \"" + name + "\" is not in the shard specs");
    if (!seen.insert(name).second) throwBadInput("async checkpoint", "tensor \"" + name + "\" appears twice");
    std::vector<std::int64_t> expected = spec->second.fullShape;
    if (spec->second.shardDim) expected[*spec->second.shardDim] = spec->second.shardSizes[rank_];
    if (t.sizes().vec() != expected)
      throwBadInput("async checkpoint", "tensor \"" + name + "\" has the wrong shape for rank " +
                                            std::to_string(rank_));
  }
  for (const auto& [name, s] : specs_)
    if (!seen.count(name)) throwBadInput("async checkpoint", "tensor \"" + name + "\" is missing from the state dict");

  // Stage on the caller's thread: after this returns, training may change the
  // originals. CUDA tensors land in pinned memory (fast, and the copy is
  // complete when copy_ returns because it is blocking).
  auto staged = std::make_shared<std::vector<std::pair<std::string, HostTensor>>>();
  for (const auto& [name, t] : stateDict) {
    at::TensorOptions opts = t.options().device(at::kCPU);
    if (t.is_cuda()) opts = opts.pinned_memory(true);
    at::Tensor host = at::empty(t.sizes(), opts);
    host.copy_(t);
    staged->emplace_back(name, hostTensorFromTorch(host));
  }

  const std::string dir = dir_;
  const int rank = rank_;
  const std::string metadata = rank_ == 0 ? ranksMetadataJson(worldSize_, specs_, step) : std::string();
  std::shared_future<void> f = std::async(std::launch::async, [staged, dir, rank, metadata, step] {
                                 std::error_code ec;
                                 fs::create_directories(dir, ec);
                                 if (ec) throwIo(dir, "cannot create the checkpoint directory", ec.value());
                                 writeSafetensors((fs::path(dir) / ("rank_" + std::to_string(rank) + ".safetensors")).string(),
                                                  *staged, {{kSaveStepKey, std::to_string(step)}});
                                 if (rank == 0) {  // last, so a reader never sees metadata before rank 0's data
                                   AtomicFile meta((fs::path(dir) / "metadata.json").string());
                                   meta.write(metadata.data(), metadata.size());
                                   meta.commit();
                                 }
                               }).share();
  inFlight_ = SaveFuture(f);
  return inFlight_;
}

}  // namespace stoker
