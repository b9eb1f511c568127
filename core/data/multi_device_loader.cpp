#include "data/multi_device_loader.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <numeric>

#include "data/sampler.h"
#include "plan/chunk_ratios.h"
#include "plan/el_che.h"
#include "util/error.h"

namespace stoker {

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

  // Feeds device d `count` samples from the order in batches of `batch`,
  // wrapping to the start of the order for padding.
  void feed(int d, std::int64_t count, std::int64_t batch, std::vector<std::int64_t>& step) {
    std::vector<std::int64_t> slice(static_cast<std::size_t>(count));
    for (auto& i : slice) i = order[static_cast<std::size_t>(cursor++ % static_cast<std::int64_t>(order.size()))];
    if (count > 0) epochs[static_cast<std::size_t>(d)].feed(slice.data(), count, batch);
    step.insert(step.end(), slice.begin(), slice.end());
  }
  void close() {
    for (auto& e : epochs) e.closeFeed();
    closed = true;
  }
  void assignElCheRounds();
};

void MultiEpoch::State::assignElCheRounds() {
  MultiDeviceLoader& m = *owner;
  const std::int64_t bs = m.options().batch_size;
  const auto n = static_cast<std::int64_t>(order.size());
  while (!closed && static_cast<int>(rounds.size()) < std::max(1, m.lookaheadRounds())) {
    const auto shares = elCheRoundShares(m.elChe()->counts(), n - cursor, bs, m.options().drop_last);
    if (shares.empty()) {
      close();
      break;
    }
    std::vector<std::int64_t> step, batches;
    for (int d = 0; d < m.devices(); ++d) {
      feed(d, shares[static_cast<std::size_t>(d)], bs, step);  // the last round wraps: padding
      batches.push_back((shares[static_cast<std::size_t>(d)] + bs - 1) / bs);
    }
    rounds.push_back(batches);
    roundIndices.push_back(std::move(step));
  }
}

MultiEpoch::MultiEpoch(std::unique_ptr<State> state) : state_(std::move(state)) {}
MultiEpoch::MultiEpoch(MultiEpoch&&) noexcept = default;
MultiEpoch::~MultiEpoch() = default;

std::optional<MultiStep> MultiEpoch::next() {
  if (!state_) return std::nullopt;
  State& s = *state_;
  if (s.owner->elChe()) {
    s.owner->recalibrate();
    s.assignElCheRounds();
  }
  if (s.rounds.empty()) return std::nullopt;
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

MultiEpoch MultiDeviceLoader::epoch(std::int64_t e) {
  auto s = std::make_unique<MultiEpoch::State>();
  s->owner = this;
  s->epoch = e;
  s->order = epochIndicesFor(*dataset_, options_, e);
  const auto n = static_cast<std::int64_t>(s->order.size());
  // Padding can add up to one batch per device beyond the order.
  const std::int64_t capacity = n + options_.batch_size * devices() + 2 * devices();
  for (auto& l : loaders_) s->epochs.push_back(l->openEpoch(e, capacity));
  if (!elChe_) {
    const std::int64_t global = std::accumulate(shares_.begin(), shares_.end(), std::int64_t{0});
    while (s->cursor + global <= n) {
      std::vector<std::int64_t> step, batches(shares_.size(), 1);
      for (int d = 0; d < devices(); ++d) s->feed(d, shares_[static_cast<std::size_t>(d)], shares_[static_cast<std::size_t>(d)], step);
      s->rounds.push_back(batches);
      s->roundIndices.push_back(std::move(step));
    }
    const std::int64_t tail = n - s->cursor;
    if (tail > 0 && !options_.drop_last) {  // the planner's short last step
      const auto last = splitLastStep(tail, multi_.weights);
      std::vector<std::int64_t> step, batches(last.size(), 1);
      for (int d = 0; d < devices(); ++d) s->feed(d, last[static_cast<std::size_t>(d)], last[static_cast<std::size_t>(d)], step);
      s->rounds.push_back(batches);
      s->roundIndices.push_back(std::move(step));
    }
    s->close();
  }
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
