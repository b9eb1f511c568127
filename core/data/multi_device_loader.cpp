#include "data/multi_device_loader.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <mutex>

#include "data/sampler.h"
#include "plan/chunk_ratios.h"
#include "plan/el_che.h"
#include "plan/shard_plan.h"
#include "util/error.h"

namespace stoker {

namespace {

// Epoch e of chunk ratios: the planner's weighted split of the sampler's order (`stoker plan
// --weights`), each device a rank.
std::shared_ptr<const ShardPlan> chunkPlanOf(const Dataset& dataset, const LoaderOptions& options, std::int64_t e,
                                             const std::vector<double>& weights) {
  return std::make_shared<const ShardPlan>(
      planWeightedOver(epochIndicesFor(dataset, options, e), options.batch_size, weights, options.drop_last));
}

}  // namespace

struct MultiEpoch::State {
  MultiDeviceLoader* owner = nullptr;
  std::int64_t epoch = 0;
  std::vector<std::int64_t> order;
  std::int64_t cursor = 0;  // next unassigned position of `order`
  std::vector<Epoch> epochs;
  std::deque<std::vector<std::int64_t>> rounds;  // batches per device, assigned and not yet served
  std::deque<std::vector<std::int64_t>> roundIndices;
  bool closed = false;
  std::int64_t served = 0;
  // Chunk ratios with lookahead: the next epoch's plan, drawn on a thread, queued once there.
  std::future<std::shared_ptr<const ShardPlan>> nextPlan;
  std::shared_ptr<const ShardPlan> queueNextPlan();
  // El Che with lookahead: the next epoch's order, drawn on a thread; queued with its first rounds
  // once this epoch's order is used up (queueNextElChe).
  std::future<std::vector<std::int64_t>> nextOrder;
  std::unique_ptr<State> queueNextElChe();
  // El Che: samples each device's fed epoch has room for -- the order, and padding of up to one
  // batch per device beyond it.
  std::int64_t elCheCapacity() const {
    const std::int64_t batch = owner->options().batch_size, devices = owner->devices();
    return static_cast<std::int64_t>(order.size()) + batch * devices + 2 * devices;
  }

  // Feeds device d's epoch in `to` `count` samples from the order in batches of `batch`,
  // wrapping to the start of the order for padding.
  void feed(std::vector<Epoch>& to, int d, std::int64_t count, std::int64_t batch, std::vector<std::int64_t>& step) {
    std::vector<std::int64_t> slice(static_cast<std::size_t>(count));
    for (auto& i : slice) i = order[static_cast<std::size_t>(cursor++ % static_cast<std::int64_t>(order.size()))];
    if (count > 0) to[static_cast<std::size_t>(d)].feed(slice.data(), count, batch);
    step.insert(step.end(), slice.begin(), slice.end());
  }
  void close(std::vector<Epoch>& to) {
    for (auto& e : to) e.closeFeed();
    closed = true;
  }
  // Assigns rounds of this state's order until the loader's lookahead are waiting, fed through
  // `to` (this epoch's devices, or -- for the next epoch's first rounds -- the epochs it is queued
  // behind); closes their feeds once the order is used up.
  void assignElCheRounds(std::vector<Epoch>& to);
  // Back to no round assigned: the epochs its first rounds were fed to are gone.
  void unassign() {
    cursor = 0;
    rounds.clear();
    roundIndices.clear();
    closed = false;
  }
};

void MultiEpoch::State::assignElCheRounds(std::vector<Epoch>& to) {
  MultiDeviceLoader& m = *owner;
  const std::int64_t bs = m.options().batch_size;
  const auto n = static_cast<std::int64_t>(order.size());
  while (!closed && static_cast<int>(rounds.size()) < std::max(1, m.lookaheadRounds())) {
    const auto shares = elCheRoundShares(m.elChe()->counts(), n - cursor, bs, m.options().drop_last);
    if (shares.empty()) {
      close(to);
      break;
    }
    std::vector<std::int64_t> step, batches;
    for (int d = 0; d < m.devices(); ++d) {
      feed(to, d, shares[static_cast<std::size_t>(d)], bs, step);  // the last round wraps: padding
      batches.push_back((shares[static_cast<std::size_t>(d)] + bs - 1) / bs);
    }
    rounds.push_back(batches);
    roundIndices.push_back(std::move(step));
  }
}

// Once this epoch's order is used up (its feeds closed), the next epoch goes behind it on every
// device as a fed epoch (Epoch::queueNextFed) and its first rounds are assigned now, by the counts
// of now -- as stale as any round assigned lookaheadRounds ahead -- so each device's workers make
// them before this epoch ends. Null when a device queued nothing (no workers): the next epoch then
// starts afresh (a device that did queue hands it over empty).
std::unique_ptr<MultiEpoch::State> MultiEpoch::State::queueNextElChe() {
  auto ahead = std::make_unique<State>();
  ahead->owner = owner;
  ahead->epoch = epoch + 1;
  ahead->order = nextOrder.get();  // a draw that failed throws here
  const std::int64_t capacity = ahead->elCheCapacity();
  bool all = true;
  for (auto& e : epochs) all = e.queueNextFed(ahead->epoch, capacity) && all;
  if (!all) return nullptr;
  ahead->assignElCheRounds(epochs);
  return ahead;
}

// Each device's part of the next epoch goes behind this epoch's, so its workers go on into it
// (Epoch::queueNext); the loader keeps the plan for the epoch(e + 1) that will serve it. A device
// that queues nothing (no workers) starts that epoch afresh; the others still adopt theirs.
std::shared_ptr<const ShardPlan> MultiEpoch::State::queueNextPlan() {
  std::shared_ptr<const ShardPlan> plan = nextPlan.get();  // a draw that failed throws here
  for (std::size_t d = 0; d < epochs.size(); ++d) {
    const RankPlan& device = plan->ranks[d];
    if (!device.indices.empty()) epochs[d].queueNext(epoch + 1, device.indices, device.stepSizes);
  }
  return plan;
}

MultiEpoch::MultiEpoch(std::unique_ptr<State> state) : state_(std::move(state)) {}
MultiEpoch::MultiEpoch(MultiEpoch&&) noexcept = default;
MultiEpoch::~MultiEpoch() = default;

std::optional<MultiStep> MultiEpoch::next() {
  if (!state_) return std::nullopt;
  State& s = *state_;
  if (s.owner->elChe()) {
    s.owner->recalibrate();
    s.assignElCheRounds(s.epochs);
    if (s.closed && s.nextOrder.valid()) {
      s.owner->queuedElChe_ = s.queueNextElChe();
      s.owner->queuedEpoch_ = s.owner->queuedElChe_ ? s.epoch + 1 : -1;
    }
  }
  if (s.rounds.empty()) {
    // Each device's epoch is told it is over: it records its summary, and one with the next
    // epoch queued behind it hands its workers and batches on to that epoch.
    for (std::size_t d = 0; d < s.epochs.size(); ++d)
      if (s.epochs[d].next())
        throw Error(ErrorKind::Internal, "multi-device epoch " + std::to_string(s.epoch),
                    "device " + std::to_string(d) + " has batches past the epoch's last step");
    return std::nullopt;
  }
  // Queued before this epoch's last step is taken: an epoch that has handed out its last batch
  // takes no more.
  if (s.nextPlan.valid() &&
      (s.rounds.size() <= 1 || s.nextPlan.wait_for(std::chrono::seconds(0)) == std::future_status::ready)) {
    s.owner->queuedPlan_ = s.queueNextPlan();
    s.owner->queuedEpoch_ = s.epoch + 1;
  }
  MultiStep step;
  step.epoch = s.epoch;
  step.index = s.served++;
  step.indices = std::move(s.roundIndices.front());
  const auto counts = std::move(s.rounds.front());
  s.rounds.pop_front();
  s.roundIndices.pop_front();
  step.perDevice.resize(counts.size());
  for (std::size_t d = 0; d < counts.size(); ++d)
    for (std::int64_t b = 0; b < counts[d]; ++b) {
      auto batch = s.epochs[d].next();
      if (!batch) throw Error(ErrorKind::Internal, "multi-device step " + std::to_string(step.index),
                              "device " + std::to_string(d) + " ran out of batches");
      step.perDevice[d].push_back(std::move(*batch));
    }
  return step;
}

MultiDeviceLoader::MultiDeviceLoader(std::shared_ptr<Dataset> dataset, LoaderOptions options,
                                     std::vector<std::shared_ptr<DeviceBackend>> devices, MultiDeviceOptions multi)
    : dataset_(std::move(dataset)), options_(std::move(options)), multi_(std::move(multi)) {
  validateLoaderOptions(options_);
  if (devices.empty()) throwBadInput("devices", "at least one device is needed");
  const int n = static_cast<int>(devices.size());
  if (multi_.elChe && !multi_.weights.empty())
    throwBadInput("weights", "give either device weights or El Che, not both");
  if (multi_.weights.empty()) multi_.weights.assign(static_cast<std::size_t>(n), 1.0);
  try {
    validateRankWeights(multi_.weights, n);
  } catch (const Error& e) {
    throwBadInput("device weights", e.reason());
  }
  checkSamplerFits(options_, dataset_->size());
  std::vector<std::int64_t> batchSizes(static_cast<std::size_t>(n), options_.batch_size);
  if (multi_.elChe) {
    elChe_ = std::make_unique<ElChe>(n, multi_.anchorBatches);
  } else {
    shares_ = splitByWeights(options_.batch_size * n, multi_.weights);
    // A short last step splits fewer samples by the same weights; the >= 1
    // rule can lift a device one or two above its full-step share.
    for (int d = 0; d < n; ++d) batchSizes[static_cast<std::size_t>(d)] = shares_[static_cast<std::size_t>(d)] + 2;
  }
  // The first device loads the dataset from the host; when it is a resident CUDA device and the
  // others are CUDA devices too, one NCCL broadcast replicates it to them (flodl's replication)
  // instead of a host-to-device copy per GPU. Elsewhere -- or when the broadcast cannot be made
  // -- every loader loads from the host itself.
  ResidentReplicas replicas;
  for (int d = 0; d < n; ++d) {
    LoaderOptions o = options_;
    o.batch_size = batchSizes[static_cast<std::size_t>(d)];
    std::vector<at::Tensor> preplaced;
    if (d > 0 && !replicas.perTarget.empty()) preplaced = replicas.perTarget[static_cast<std::size_t>(d - 1)];
    auto loader = std::make_unique<Loader>(dataset_, o, devices[static_cast<std::size_t>(d)], nullptr, std::move(preplaced));
    loader->setTelemetryRank(options_.shard_rank);
    if (d == 0 && n > 1 && loader->mode() == LoadingMode::Resident && loader->device().kind() == DeviceKind::Cuda &&
        options_.loading_mode != LoadingMode::Streaming) {
      const std::vector<std::shared_ptr<DeviceBackend>> others(devices.begin() + 1, devices.end());
      replicas = broadcastResident(loader->residentFields(), others);
      replication_ = replicas.perTarget.empty()
                         ? "each device loads the dataset from the host (" + replicas.why + ")"
                         : "the dataset was replicated from " + loader->device().name() + " by one NCCL broadcast";
    }
    loaders_.push_back(std::move(loader));
  }
  // flodl picks the resident device with the most free memory (its probe
  // returns used bytes, so as written it picks the most used; we use free).
  std::int64_t bestFree = -1;
  for (int d = 0; d < n; ++d) {
    const Loader& l = *loaders_[static_cast<std::size_t>(d)];
    if (l.mode() != LoadingMode::Resident || l.device().isHost()) continue;
    const std::int64_t free = l.device().memory().free;
    if (free > bestFree) bestFree = free, gather_ = d;
  }
}

MultiDeviceLoader::~MultiDeviceLoader() = default;

std::vector<std::int64_t> MultiDeviceLoader::stepShares() const {
  if (!elChe_) return shares_;
  std::vector<std::int64_t> s = elChe_->counts();
  for (auto& c : s) c *= options_.batch_size;
  return s;
}

MultiEpoch MultiDeviceLoader::epoch(std::int64_t e, Loader::Lookahead lookahead) {
  auto s = std::make_unique<MultiEpoch::State>();
  s->owner = this;
  s->epoch = e;
  if (elChe_) {
    // The epoch a previous one queued, when it is this one (the same draw: the sampler depends only
    // on the options, the dataset's size and e): its first rounds are fed and being made already.
    std::unique_ptr<MultiEpoch::State> ahead = queuedEpoch_ == e ? std::move(queuedElChe_) : nullptr;
    queuedElChe_.reset();
    queuedEpoch_ = -1;
    if (ahead)
      s = std::move(ahead);
    else
      s->order = epochIndicesFor(*dataset_, options_, e);
    const std::int64_t capacity = s->elCheCapacity();
    for (auto& l : loaders_) s->epochs.push_back(l->openEpoch(e, capacity));
    // Each device must have adopted exactly the batches its queued epoch was fed; one that did not
    // (a retune or another epoch in between dropped it) starts the whole epoch afresh.
    bool adopted = true;
    for (std::size_t d = 0; d < s->epochs.size(); ++d) {
      std::int64_t fed = 0;
      for (const auto& round : s->rounds) fed += round[d];
      adopted = adopted && s->epochs[d].batches() == fed;
    }
    if (!adopted) {
      s->epochs.clear();  // stops what was adopted
      s->unassign();
      for (auto& l : loaders_) s->epochs.push_back(l->openEpoch(e, capacity));
    }
    if (lookahead == Loader::Lookahead::NextEpoch && options_.persistent_workers && options_.num_workers > 0)
      s->nextOrder = std::async(std::launch::async, [dataset = dataset_, options = options_, e] {
        return epochIndicesFor(*dataset, options, e + 1);
      });
    return MultiEpoch(std::move(s));
  }
  // Chunk ratios: each device serves its slices as an epoch of its own, in batches of its share --
  // the epoch a previous one queued when it is this one (the same draw: the sampler depends only on
  // the options, the dataset's size and e), whose first batches are made already.
  std::shared_ptr<const ShardPlan> plan = queuedEpoch_ == e ? queuedPlan_ : chunkPlanOf(*dataset_, options_, e, multi_.weights);
  queuedPlan_.reset();
  queuedEpoch_ = -1;
  const auto n = static_cast<std::size_t>(devices());
  for (std::size_t d = 0; d < n; ++d)
    s->epochs.push_back(loaders_[d]->epochOver(e, plan->ranks[d].indices, plan->ranks[d].stepSizes));
  std::vector<std::int64_t> at(n, 0);  // each step's samples, device 0's first
  for (std::int64_t step = 0; step < plan->steps; ++step) {
    std::vector<std::int64_t> indices;
    for (std::size_t d = 0; d < n; ++d) {
      const RankPlan& device = plan->ranks[d];
      const auto begin = device.indices.begin() + at[d];
      at[d] += device.stepSizes[static_cast<std::size_t>(step)];
      indices.insert(indices.end(), begin, device.indices.begin() + at[d]);
    }
    s->rounds.emplace_back(n, 1);
    s->roundIndices.push_back(std::move(indices));
  }
  s->closed = true;
  if (lookahead == Loader::Lookahead::NextEpoch && options_.persistent_workers && options_.num_workers > 0)
    s->nextPlan = std::async(std::launch::async, [dataset = dataset_, options = options_, weights = multi_.weights, e] {
      return chunkPlanOf(*dataset, options, e + 1, weights);
    });
  return MultiEpoch(std::move(s));
}

Batch MultiDeviceLoader::gather(const MultiStep& step) const {
  return loaders_[static_cast<std::size_t>(gather_)]->fetch(step.indices, step.epoch);
}

void MultiDeviceLoader::recordStepTime(int device, double ms, std::int64_t batches) {
  if (elChe_) elChe_->record(device, ms, batches);
}

void MultiDeviceLoader::recalibrate() {
  if (elChe_) elChe_->calibrate();
}

std::vector<std::string> MultiDeviceLoader::notes() const {
  std::vector<std::string> all;
  for (const auto& l : loaders_)
    for (const auto& n : l->notes()) all.push_back(l->device().name() + ": " + n);
  all.push_back("gather device: " + loaders_[static_cast<std::size_t>(gather_)]->device().name());
  if (!replication_.empty()) all.push_back(replication_);
  return all;
}

}  // namespace stoker
