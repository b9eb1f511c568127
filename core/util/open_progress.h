// util/open_progress: progress and cancel for opening a dataset, which can take minutes (a remote
// WebDataset without indexes is downloaded to scan its shards), without threading them through
// every openDataset caller. A caller installs them for its thread while it opens
// (OpenProgressScope); a dataset whose open is long takes them at the start of its open
// (currentOpenProgress), on that thread, and uses them from its own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "util/progress.h"

namespace stoker {

struct OpenProgress {
  ProgressSink* sink = nullptr;         // told what the open has done so far (may be null)
  const CancelToken* cancel = nullptr;  // polled between pieces of the open (may be null)
};

// What this thread's caller installed; empty when nothing is.
OpenProgress currentOpenProgress();

// Installs `progress` for this thread until destroyed (scopes nest: the outer one comes back).
class OpenProgressScope {
 public:
  explicit OpenProgressScope(OpenProgress progress);
  ~OpenProgressScope();
  OpenProgressScope(const OpenProgressScope&) = delete;
  OpenProgressScope& operator=(const OpenProgressScope&) = delete;

 private:
  OpenProgress previous_;
};

// An open made of `pieces` pieces of sizes known only as each is done (a WebDataset's shards):
// reports the bytes done so far against a total estimated from the mean piece done, at most every
// 200 ms, and a last update from finish(). Thread-safe. Does nothing without a sink.
class OpenProgressMeter {
 public:
  OpenProgressMeter(OpenProgress progress, std::int64_t pieces);
  // Throws Error(Cancelled) naming `subject` once the open's token is cancelled.
  void checkCancelled(const std::string& subject) const;
  void pieceDone(std::uint64_t bytes, const std::string& item);
  void finish();

 private:
  void emit(const std::string& item, bool finished);  // the caller holds mutex_
  OpenProgress progress_;
  std::int64_t pieces_, piecesDone_ = 0;
  std::uint64_t bytesDone_ = 0;
  std::chrono::steady_clock::time_point start_, lastEmit_{};
  std::mutex mutex_;
};

}  // namespace stoker
