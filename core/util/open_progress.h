// util/open_progress: progress and cancel for opening a dataset, which can take minutes (a remote
// WebDataset without indexes is downloaded to scan its shards), without threading them through
// every openDataset caller. A caller installs them for its thread while it opens
// (OpenProgressScope); a dataset whose open is long takes them at the start of its open
// (currentOpenProgress), on that thread, and uses them from its own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "util/progress.h"

namespace stoker {

struct OpenProgress {
  ProgressSink* sink = nullptr;         // told what the open has done so far (may be null)
  const CancelToken* cancel = nullptr;  // polled between pieces of the open (may be null)
};

// What this thread's caller installed; empty when nothing is.
OpenProgress currentOpenProgress();

// How far an open is, in words, from an OpenProgressMeter's update: "16.5 MiB of about 40.2 MiB
// downloaded", "12 of 1000 class folders listed", or "12000 objects listed" (a count whose total is
// not known); "" before the first update. The Python package, the workbench's status line and its
// Remote... dialog all say it this way (the CLI draws its own bar from the same update).
std::string describeOpenProgress(const ProgressUpdate& u);

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

// An open made of `pieces` pieces whose sizes are known only as each is reached (a WebDataset's
// shards): reports the bytes read so far against a total estimated from the mean size of the
// pieces read, at most every 200 ms, and a last update from finish(). Progress moves within a
// piece too (Piece::reached), so a few multi-GB shards do not show it in a handful of jumps.
// A piece done without reading it (Piece::doneWithoutReading: a shard whose scan was kept, or
// read from its DALI index; a class folder listed) counts no bytes: counted as read, a thousand
// kept shards opened in a second showed a download of GB/s. Until a piece's bytes are read, and in
// an open that reads none, it reports pieces instead, as `unit` (a noun and what is done to them:
// "shards opened").
// Thread-safe. Does nothing without a sink.
class OpenProgressMeter {
 public:
  // `pieces` < 0: not known ahead (a listing's objects, told by tally()): the updates' total is 0.
  OpenProgressMeter(OpenProgress progress, std::int64_t pieces, std::string unit);
  // Throws Error(Cancelled) naming `subject` once the open's token is cancelled.
  void checkCancelled(const std::string& subject) const;
  void finish();
  // An open of pieces not known ahead: `count` of them done so far, working on `item`.
  void tally(std::uint64_t count, const std::string& item);

  // One piece, by one thread: read from its start (its size once known, how far its reader is,
  // then done; what reached() did not count, done() does), or done without reading it.
  class Piece {
   public:
    Piece(OpenProgressMeter& meter, std::string item) : meter_(meter), item_(std::move(item)) {}
    void sized(std::uint64_t bytes);
    void reached(std::uint64_t position);  // counted in steps of 64 KiB at least
    void done(std::uint64_t bytes);  // after doneWithoutReading(): nothing more
    void doneWithoutReading();       // before sized()

   private:
    OpenProgressMeter& meter_;
    std::string item_;
    bool sized_ = false, unread_ = false;
    std::uint64_t size_ = 0, counted_ = 0;
  };

 private:
  struct Step {
    bool sized = false;  // a piece read is now `size` bytes
    std::uint64_t size = 0;
    std::uint64_t done = 0;  // bytes read
    bool pieceDone = false, pieceUnread = false;
  };
  void add(const Step& step, const std::string& item);
  // At most every 200 ms: emit(item, false). The caller holds mutex_.
  void emitIfDue(std::chrono::steady_clock::time_point now, const std::string& item);
  void emit(const std::string& item, bool finished);  // the caller holds mutex_
  OpenProgress progress_;
  std::string unit_;
  std::int64_t pieces_, piecesSized_ = 0, piecesDone_ = 0, piecesUnread_ = 0;
  std::uint64_t bytesSized_ = 0, bytesDone_ = 0;
  std::chrono::steady_clock::time_point start_, lastEmit_{}, lastStep_;
  std::optional<std::chrono::steady_clock::time_point> readStart_;  // when the first piece read began
  std::mutex mutex_;
};

}  // namespace stoker
