// util/progress: the two small types long operations share with their callers.
// The GUI adapts them to Qt signals on a worker thread; the CLI prints a line.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "util/error.h"

namespace stoker {

// Polled by long operations between units of work; cancel() may be called
// from any thread.
class CancelToken {
 public:
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool isCancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // Throws Error(Cancelled) naming `what` if cancellation was requested.
  void throwIfCancelled(const std::string& what) const {
    if (isCancelled()) throw Error(ErrorKind::Cancelled, what, "cancelled");
  }

 private:
  std::atomic<bool> cancelled_{false};
};

struct Progress {
  std::uint64_t done = 0;   // bytes or items, see `unit`
  std::uint64_t total = 0;  // 0 when unknown
  std::string unit = "bytes";
  std::string current;      // the item being worked on (a tensor name, a file)
  double ratePerSecond = 0; // over the whole operation so far
};

// Receives progress reports; implementations must be cheap and thread-safe
// for the calling thread (the operation's worker).
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void report(const Progress& progress) = 0;
};

}  // namespace stoker
