#include "util/open_progress.h"

namespace stoker {
namespace {
thread_local OpenProgress tCurrent;
}  // namespace

OpenProgress currentOpenProgress() { return tCurrent; }

OpenProgressScope::OpenProgressScope(OpenProgress progress) : previous_(tCurrent) { tCurrent = progress; }

OpenProgressScope::~OpenProgressScope() { tCurrent = previous_; }

OpenProgressMeter::OpenProgressMeter(OpenProgress progress, std::int64_t pieces)
    : progress_(progress), pieces_(pieces), start_(std::chrono::steady_clock::now()) {}

void OpenProgressMeter::checkCancelled(const std::string& subject) const {
  if (progress_.cancel) progress_.cancel->throwIfCancelled(subject);
}

void OpenProgressMeter::pieceDone(std::uint64_t bytes, const std::string& item) {
  if (!progress_.sink) return;
  std::lock_guard<std::mutex> lock(mutex_);
  ++piecesDone_;
  bytesDone_ += bytes;
  if (std::chrono::steady_clock::now() - lastEmit_ >= std::chrono::milliseconds(200)) emit(item, false);
}

void OpenProgressMeter::finish() {
  if (!progress_.sink) return;
  std::lock_guard<std::mutex> lock(mutex_);
  emit("", true);
}

void OpenProgressMeter::emit(const std::string& item, bool finished) {
  const auto now = std::chrono::steady_clock::now();
  lastEmit_ = now;
  ProgressUpdate u;
  u.done = bytesDone_;
  // The pieces left are taken to be as large as the mean one done.
  u.total = finished || piecesDone_ == 0 || piecesDone_ >= pieces_
                ? bytesDone_
                : static_cast<std::uint64_t>(static_cast<double>(bytesDone_) / static_cast<double>(piecesDone_) *
                                             static_cast<double>(pieces_));
  u.item = item;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  u.perSecond = seconds > 0 ? static_cast<double>(bytesDone_) / seconds : 0;
  u.etaSeconds = finished ? 0 : u.perSecond > 0 ? static_cast<double>(u.total - u.done) / u.perSecond : -1;
  u.finished = finished;
  progress_.sink->progress(u);
}

}  // namespace stoker
