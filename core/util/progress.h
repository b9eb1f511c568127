// util/progress: the two small types long operations share with their callers.
// A ProgressSink receives bytes/items done and total, the current item, the
// rate and an ETA; a CancelToken is polled so work stops at a safe point.
// Both are thread-safe: conversions report from several worker threads, and
// the GUI adapts them to Qt signals in a worker living on a QThread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace stoker {

struct ProgressUpdate {
  std::uint64_t done = 0;
  std::uint64_t total = 0;
  std::string item;            // what is being worked on now (tensor or file name)
  double perSecond = 0;        // rate of `done` units since the start
  double etaSeconds = -1;      // -1 while unknown
  bool finished = false;       // the last update of the operation
  // What done and total count: empty for bytes, else a plural noun with what is done to them
  // ("class folders listed"), which printers show after the numbers. With a unit, total 0 before
  // the last update says the total is not known (a listing's objects): printers show the count.
  std::string unit;
};

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  // Called from any thread, at most every few tens of milliseconds.
  virtual void progress(const ProgressUpdate& update) = 0;
  // Warnings and notes meant for a log pane (e.g. f16 overflow).
  virtual void note(const std::string& /*text*/) {}
};

class CancelToken {
 public:
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // Throws Error(Cancelled) naming `subject` when cancel() was called.
  void throwIfCancelled(const std::string& subject) const;

 private:
  std::atomic<bool> cancelled_{false};
};

// Aggregates progress from many threads and forwards it to a sink, throttled.
class ProgressMeter {
 public:
  // Forwards the first update, then at most one per `interval` (plus the final one).
  ProgressMeter(ProgressSink* sink, std::uint64_t total, std::uint64_t alreadyDone = 0,
                std::chrono::milliseconds interval = std::chrono::milliseconds(50));
  void add(std::uint64_t n, const std::string& item);
  void finish();
  std::uint64_t done() const { return done_.load(); }

 private:
  void emit(const std::string& item, bool finished);

  ProgressSink* sink_;
  std::uint64_t total_;
  std::uint64_t startDone_;
  std::chrono::milliseconds interval_;
  std::atomic<std::uint64_t> done_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastEmit_;
  std::mutex mutex_;
};

}  // namespace stoker
