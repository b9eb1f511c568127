#include "data/datasets/wds_read_plan.h"

#include <algorithm>
#include <cstring>

namespace stoker {

namespace {

// Per sample, how many times `indices` reads it (an order may repeat a sample: padding).
void countReads(std::vector<std::uint16_t>& left, const std::int64_t* indices, std::size_t count) {
  std::fill(left.begin(), left.end(), std::uint16_t{0});
  for (std::size_t k = 0; k < count; ++k)
    if (left[static_cast<std::size_t>(indices[k])] < UINT16_MAX) ++left[static_cast<std::size_t>(indices[k])];
}

}  // namespace

WdsReadPlan::WdsReadPlan(std::vector<Span> spans, std::vector<std::int64_t> shardBegin)
    : spans_(std::move(spans)), shardBegin_(std::move(shardBegin)) {}

void WdsReadPlan::planned(const std::vector<std::int64_t>& order, std::int64_t epoch, std::vector<std::int64_t> nextShard) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A second draw of an epoch already planned replaces its plan and those after it: a loader's
  // next epoch, drawn ahead when this one started and dropped by a retune between batches, is
  // drawn again at the boundary. Any other epoch than the next is a new start (another loader, a
  // resumed job): the plans go. What was kept stays while the plans left read it -- the bytes are
  // the shard's, whoever drew the order: dropping them made the readahead fetch their blocks again.
  const bool replanned = !plans_.empty() && epoch != plans_.back().epoch + 1;
  while (!plans_.empty() && plans_.back().epoch >= epoch) plans_.pop_back();
  if (!plans_.empty() && epoch != plans_.back().epoch + 1) plans_.clear();
  if (plans_.empty()) readingEpoch_ = -1;
  Plan plan;
  plan.epoch = epoch;
  plan.nextShard = std::move(nextShard);
  plan.left.resize(spans_.size());
  countReads(plan.left, order.data(), order.size());
  plans_.push_back(std::move(plan));
  while (plans_.size() > 3) plans_.pop_front();  // drawn and never read (an abandoned loop)
  if (replanned)
    for (auto it = kept_.begin(); it != kept_.end();) it = stillToRead(it->first) ? std::next(it) : kept_.erase(it);
}

const WdsReadPlan::Plan* WdsReadPlan::planOf(std::int64_t epoch) const {
  for (const Plan& p : plans_)
    if (p.epoch == epoch) return &p;
  return nullptr;
}

const WdsReadPlan::Plan* WdsReadPlan::planReadNow() const {
  if (const Plan* p = readingEpoch_ >= 0 ? planOf(readingEpoch_) : nullptr) return p;
  return plans_.empty() ? nullptr : &plans_.front();
}

bool WdsReadPlan::stillToRead(std::int64_t index) const {
  if (plans_.empty()) return false;
  const std::int64_t now = readingEpoch_ >= 0 ? readingEpoch_ : plans_.front().epoch;
  for (const std::int64_t e : {now - 1, now})
    if (const Plan* p = planOf(e); p && p->left[static_cast<std::size_t>(index)] > 0) return true;
  return false;
}

std::vector<std::int64_t> WdsReadPlan::shardsAfter(std::int64_t shard, int count, std::uint64_t firstBlock) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::int64_t> out;
  const Plan* now = planReadNow();
  auto wanted = [&](std::int64_t at) {
    for (std::int64_t k = shardBegin_[static_cast<std::size_t>(at)]; k < shardBegin_[static_cast<std::size_t>(at) + 1]; ++k) {
      const Span& s = spans_[static_cast<std::size_t>(k)];
      if (s.hi > s.lo && s.lo < firstBlock && stillToRead(k) && !kept_.count(k)) return true;
    }
    return false;
  };
  for (std::int64_t at = shard; now && count-- > 0;) {
    if ((at = now->nextShard[static_cast<std::size_t>(at)]) < 0) break;
    if (wanted(at)) out.push_back(at);
  }
  return out;
}

void WdsReadPlan::keepFrom(std::int64_t shard, std::uint64_t start, const std::uint8_t* bytes, std::size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t end = start + n;
  for (std::int64_t k = shardBegin_[static_cast<std::size_t>(shard)]; k < shardBegin_[static_cast<std::size_t>(shard) + 1]; ++k) {
    const Span& s = spans_[static_cast<std::size_t>(k)];
    if (s.hi <= s.lo || s.lo < start || s.hi > end) continue;  // not whole in this block: fetched again when asked
    if (kept_.count(k) || !stillToRead(k)) continue;
    Kept kept;
    kept.start = s.lo;
    kept.bytes.assign(bytes + (s.lo - start), bytes + (s.hi - start));
    kept_.emplace(k, std::move(kept));
  }
}

bool WdsReadPlan::readKept(std::int64_t index, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = kept_.find(index);
  if (it == kept_.end() || offset < it->second.start || offset + n > it->second.start + it->second.bytes.size()) return false;
  std::memcpy(dst, it->second.bytes.data() + (offset - it->second.start), static_cast<std::size_t>(n));
  return true;
}

void WdsReadPlan::rest(std::int64_t epoch, const std::int64_t* indices, std::int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Plan& plan : plans_)
    if (plan.epoch == epoch) countReads(plan.left, indices, static_cast<std::size_t>(count));
}

// Once reads reach epoch e, epochs before e - 1 are left behind (a tail never read stays with
// them), and a kept sample goes when no read of it is left to come.
void WdsReadPlan::read(std::int64_t index, std::int64_t epoch) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto i = static_cast<std::size_t>(index);
  for (Plan& plan : plans_)
    if (plan.epoch == epoch && plan.left[i] > 0) --plan.left[i];
  if (epoch > readingEpoch_) {
    readingEpoch_ = epoch;
    while (!plans_.empty() && plans_.front().epoch < epoch - 1) plans_.pop_front();
    for (auto it = kept_.begin(); it != kept_.end();) it = stillToRead(it->first) ? std::next(it) : kept_.erase(it);
  }
  if (!stillToRead(index)) kept_.erase(index);
}

std::size_t WdsReadPlan::keptSamples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.size();
}

}  // namespace stoker
