// telemetry/telemetry_queue: a bounded, thread-safe mailbox of records. A
// loader (or a listener thread) pushes; a GUI timer takes everything at its
// own pace. When the reader falls behind, the oldest records go and are
// counted, so a producer never waits and memory stays bounded.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "telemetry/telemetry_record.h"

namespace stoker {

class TelemetryQueue : public TelemetryObserver {
 public:
  explicit TelemetryQueue(std::size_t limit = 8192) : limit_(limit) {}

  void onRecord(const TelemetryRecord& record) override { push(record); }
  void push(TelemetryRecord record) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (records_.size() >= limit_) {
      records_.pop_front();
      ++dropped_;
    }
    records_.push_back(std::move(record));
  }
  std::vector<TelemetryRecord> takeAll() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<TelemetryRecord> out(std::make_move_iterator(records_.begin()), std::make_move_iterator(records_.end()));
    records_.clear();
    return out;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_.size();
  }
  std::size_t limit() const { return limit_; }
  std::int64_t dropped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }

 private:
  std::size_t limit_;
  mutable std::mutex mutex_;
  std::deque<TelemetryRecord> records_;
  std::int64_t dropped_ = 0;
};

}  // namespace stoker
