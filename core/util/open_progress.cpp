#include "util/open_progress.h"

#include <algorithm>

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

void OpenProgressMeter::add(bool sized, std::uint64_t size, std::uint64_t done, const std::string& item) {
  if (!progress_.sink) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (sized) {
    ++piecesSized_;
    bytesSized_ += size;
  }
  bytesDone_ += done;
  // A size alone is not news: the first update comes with bytes read.
  if (done > 0 && std::chrono::steady_clock::now() - lastEmit_ >= std::chrono::milliseconds(200)) emit(item, false);
}

void OpenProgressMeter::Piece::sized(std::uint64_t bytes) {
  if (sized_) return;
  sized_ = true;
  size_ = bytes;
  meter_.add(true, bytes, 0, item_);
}

void OpenProgressMeter::Piece::reached(std::uint64_t position) {
  const std::uint64_t at = std::min(position, size_);
  if (!sized_ || at < counted_ + (64u << 10)) return;  // a lock a header would be many for small members
  meter_.add(false, 0, at - counted_, item_);
  counted_ = at;
}

void OpenProgressMeter::Piece::done(std::uint64_t bytes) {
  if (!sized_) {
    sized_ = true;
    size_ = bytes;
    meter_.add(true, bytes, bytes, item_);
  } else {
    meter_.add(false, 0, bytes > counted_ ? bytes - counted_ : 0, item_);
  }
  counted_ = std::max(counted_, bytes);
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
  // The pieces not reached yet are taken to be as large as the mean one reached.
  u.total = finished || piecesSized_ == 0
                ? bytesDone_
                : std::max(bytesDone_, piecesSized_ >= pieces_
                                           ? bytesSized_
                                           : static_cast<std::uint64_t>(static_cast<double>(bytesSized_) /
                                                                        static_cast<double>(piecesSized_) * static_cast<double>(pieces_)));
  u.item = item;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  u.perSecond = seconds > 0 ? static_cast<double>(bytesDone_) / seconds : 0;
  u.etaSeconds = finished ? 0 : u.perSecond > 0 ? static_cast<double>(u.total - u.done) / u.perSecond : -1;
  u.finished = finished;
  progress_.sink->progress(u);
}

}  // namespace stoker
