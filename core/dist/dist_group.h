// dist/dist_group: the ranks of a job talking through libtorch's c10d --
// rendezvous on a TCPStore hosted by rank 0, collectives through Gloo (CPU
// tensors) or, when the ranks feed CUDA devices, ProcessGroupNCCL (tensors on
// the rank's GPU), as a PyTorch job on GPUs would. What Stoker exchanges is
// small: plan digests, step times. No home-made protocol. Built only where
// libtorch has c10d headers (STOKER_WITH_C10D); Gloo where its headers are
// (Debian's libgloo-dev; PyTorch's wheels ship none), NCCL only against a CUDA
// libtorch; a backend not built, or no c10d at all, makes connect() throw and
// say so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/torchrun_env.h"

namespace stoker {

bool distAvailable();

enum class CollectiveBackend { Gloo, Nccl };
std::string collectiveBackendName(CollectiveBackend b);  // "gloo", "nccl"
// NCCL where the rank feeds a CUDA device (cudaDevice >= 0) and this build has it, else Gloo.
CollectiveBackend collectiveBackendFor(int cudaDevice);

class DistGroup {
 public:
  // Joins the job: rank 0 hosts the store at MASTER_ADDR:MASTER_PORT (under
  // torchrun's agent store, the agent does). Each rank registers, then waits
  // for all WORLD_SIZE ranks; after `timeoutSeconds` it throws
  // Error(Timeout) naming the ranks that never joined (or, for a client, that
  // no store answered). Collectives that fail because a peer died, or wait
  // longer than `collectiveTimeoutSeconds` (torch's default 30 min), throw
  // Error(Io) naming the collective.
  // NCCL runs its collectives on `cudaDevice` (this rank's GPU).
  static std::unique_ptr<DistGroup> connect(const DistEnv& env, double timeoutSeconds,
                                            CollectiveBackend backend = CollectiveBackend::Gloo, int cudaDevice = -1,
                                            double collectiveTimeoutSeconds = kDefaultCollectiveTimeoutSeconds);
  static constexpr double kDefaultCollectiveTimeoutSeconds = 1800;
  ~DistGroup();

  int rank() const;
  int worldSize() const;
  CollectiveBackend backend() const;
  std::vector<std::int64_t> allgather(std::int64_t value);
  std::vector<double> allgather(double value);
  std::vector<std::string> allgather(const std::string& bytes);  // any lengths, any bytes
  void barrier();

 private:
  struct Impl;
  explicit DistGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
