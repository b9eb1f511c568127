// data/multi_device_loader: one process feeding several devices (flodl's
// DistributedLoader). Each device gets its own Loader and backend --
// resident where the dataset fits, streaming otherwise -- and the loader
// executes the planner's split of every global batch:
//  - chunk ratios: each step's B * D samples split by per-device weights
//    (largest remainder, every device >= 1), like `stoker plan --weights`;
//  - El Che: per round, device d runs counts[d] whole batches of B; counts
//    follow the times the trainer records (recordStepTime), clamped at the
//    end of the epoch like `stoker plan --step-ms`.
// Both run epoch after epoch without a gap: epoch(e, Loader::Lookahead::NextEpoch) draws epoch
// e + 1's order on a thread and queues each device's part of it behind this epoch, so the workers
// make its first steps before this one ends. Chunk ratios queue the whole plan (Epoch::queueNext);
// El Che, whose rounds follow times not measured yet, queues a fed epoch (Epoch::queueNextFed)
// once this epoch's order is used up and feeds it its first lookaheadRounds rounds.
// The gather device (where the whole step can be assembled for the loss) is
// the resident device with the most free memory, as flodl intends. On
// several CUDA devices the first loads the resident dataset from the host
// and one NCCL broadcast replicates it to the others.
//
//   MultiDeviceLoader loader(dataset, options, {sim0, sim1}, {.weights = {3, 1}});
//   auto epoch = loader.epoch(e);
//   while (auto step = epoch.next()) for (int d = 0; ...) train(d, step->perDevice[d]);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"

namespace stoker {

class ElChe;

struct MultiDeviceOptions {
  std::vector<double> weights;  // chunk ratios per device; empty = equal
  bool elChe = false;           // batch counts from measured times instead
  std::int64_t anchorBatches = 4;
  int lookaheadRounds = 2;      // El Che rounds assigned ahead of the consumer
};

struct MultiStep {
  std::int64_t epoch = 0;
  std::int64_t index = 0;                      // step (El Che: round) in the epoch
  std::vector<std::vector<Batch>> perDevice;   // device d's batches this step
  std::vector<std::int64_t> indices;           // the whole step, device 0's first
};

class MultiDeviceLoader;
struct ShardPlan;

class MultiEpoch {
 public:
  MultiEpoch(MultiEpoch&&) noexcept;
  ~MultiEpoch();
  // The next step, or nullopt at the end of the epoch.
  std::optional<MultiStep> next();

 private:
  friend class MultiDeviceLoader;
  struct State;
  explicit MultiEpoch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class MultiDeviceLoader {
 public:
  // Throws Error(BadInput) for no devices, weights of the wrong count or
  // not positive, or El Che and weights together.
  MultiDeviceLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options,
                    std::vector<std::shared_ptr<DeviceBackend>> devices, MultiDeviceOptions multi = {});
  ~MultiDeviceLoader();

  int devices() const { return static_cast<int>(loaders_.size()); }
  Loader& loader(int device) { return *loaders_.at(static_cast<std::size_t>(device)); }
  const LoaderOptions& options() const { return options_; }
  // Resident device with the most free memory; 0 when none is resident.
  int gatherDevice() const { return gather_; }
  // Samples per step each device gets (chunk ratios; El Che: counts * B).
  std::vector<std::int64_t> stepShares() const;

  // Starts epoch `e` on every device (one epoch at a time). Lookahead::NextEpoch (persistent_workers
  // and workers): epoch e + 1's first steps are made before this epoch ends, and epoch(e + 1)
  // starts with them ready, as Loader::epoch does.
  MultiEpoch epoch(std::int64_t e, Loader::Lookahead lookahead = Loader::Lookahead::Off);
  // The whole step as one batch on the gather device, gathered from its own resident copy: no
  // batch travels between devices or through the host.
  Batch gather(const MultiStep& step) const;

  // El Che: the trainer's wall time for `batches` batches on `device`.
  void recordStepTime(int device, double ms, std::int64_t batches);
  // Recomputes El Che counts from the recorded times (each next() does).
  void recalibrate();
  const ElChe* elChe() const { return elChe_.get(); }
  int lookaheadRounds() const { return multi_.lookaheadRounds; }
  std::vector<std::string> notes() const;

 private:
  friend class MultiEpoch;  // keeps the plan an epoch queued behind it
  std::shared_ptr<Dataset> dataset_;
  LoaderOptions options_;
  MultiDeviceOptions multi_;
  std::vector<std::unique_ptr<Loader>> loaders_;
  std::vector<std::int64_t> shares_;  // chunk mode: samples per step per device
  std::unique_ptr<ElChe> elChe_;
  int gather_ = 0;
  std::string replication_;  // how the other CUDA devices got the resident dataset (notes)
  // The epoch an epoch queued behind it (lookahead), for the epoch(e) it is for: chunk ratios'
  // plan, or El Che's order with the rounds fed to the devices so far.
  std::shared_ptr<const ShardPlan> queuedPlan_;
  std::unique_ptr<MultiEpoch::State> queuedElChe_;
  std::int64_t queuedEpoch_ = -1;
};

}  // namespace stoker
