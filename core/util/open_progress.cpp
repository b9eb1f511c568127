#include "util/open_progress.h"

#include <algorithm>

#include "util/byte_size.h"

namespace stoker {
namespace {
thread_local OpenProgress tCurrent;
}  // namespace

OpenProgress currentOpenProgress() { return tCurrent; }

std::string describeOpenProgress(const ProgressUpdate& u) {
  if (u.unit.empty()) return u.total == 0 ? std::string() : humanBytes(u.done) + " of about " + humanBytes(u.total) + " downloaded";
  if (u.total == 0 && !u.finished) return std::to_string(u.done) + " " + u.unit;
  return std::to_string(u.done) + " of " + std::to_string(u.total) + " " + u.unit;
}

OpenProgressScope::OpenProgressScope(OpenProgress progress) : previous_(tCurrent) { tCurrent = progress; }

OpenProgressScope::~OpenProgressScope() { tCurrent = previous_; }

OpenProgressMeter::OpenProgressMeter(OpenProgress progress, std::int64_t pieces, std::string unit)
    : progress_(progress), unit_(std::move(unit)), pieces_(pieces), start_(std::chrono::steady_clock::now()), lastStep_(start_) {}

void OpenProgressMeter::checkCancelled(const std::string& subject) const {
  if (progress_.cancel) progress_.cancel->throwIfCancelled(subject);
}

void OpenProgressMeter::add(const Step& step, const std::string& item) {
  if (!progress_.sink) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Reading starts at the first piece sized, or (a piece read in one step) at the step before its bytes.
  const auto now = std::chrono::steady_clock::now();
  if (!readStart_ && (step.sized || step.done > 0)) readStart_ = step.sized && step.done == 0 ? now : lastStep_;
  lastStep_ = now;
  if (step.sized) {
    ++piecesSized_;
    bytesSized_ += step.size;
  }
  bytesDone_ += step.done;
  piecesDone_ += step.pieceDone ? 1 : 0;
  piecesUnread_ += step.pieceUnread ? 1 : 0;
  // A size alone is not news: an update comes with bytes read, or (none read yet) a piece done.
  const bool news = step.done > 0 || (bytesDone_ == 0 && step.pieceDone);
  if (news) emitIfDue(now, item);
}

void OpenProgressMeter::emitIfDue(std::chrono::steady_clock::time_point now, const std::string& item) {
  if (now - lastEmit_ >= std::chrono::milliseconds(200)) emit(item, false);
}

void OpenProgressMeter::Piece::sized(std::uint64_t bytes) {
  if (sized_ || unread_) return;
  sized_ = true;
  size_ = bytes;
  meter_.add({true, bytes, 0, false, false}, item_);
}

void OpenProgressMeter::Piece::reached(std::uint64_t position) {
  const std::uint64_t at = std::min(position, size_);
  if (!sized_ || at < counted_ + (64u << 10)) return;  // a lock a header would be many for small members
  meter_.add({false, 0, at - counted_, false, false}, item_);
  counted_ = at;
}

void OpenProgressMeter::Piece::done(std::uint64_t bytes) {
  if (unread_) return;
  if (!sized_) {
    sized_ = true;
    size_ = bytes;
    meter_.add({true, bytes, bytes, true, false}, item_);
  } else {
    meter_.add({false, 0, bytes > counted_ ? bytes - counted_ : 0, true, false}, item_);
  }
  counted_ = std::max(counted_, bytes);
}

void OpenProgressMeter::Piece::doneWithoutReading() {
  if (unread_ || sized_) return;
  unread_ = true;
  meter_.add({false, 0, 0, true, true}, item_);
}

void OpenProgressMeter::tally(std::uint64_t count, const std::string& item) {
  if (!progress_.sink) return;
  std::lock_guard<std::mutex> lock(mutex_);
  piecesDone_ = static_cast<std::int64_t>(count);
  emitIfDue(std::chrono::steady_clock::now(), item);
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
  if (bytesDone_ == 0) {  // no piece read yet (or none to read): pieces
    u.done = static_cast<std::uint64_t>(piecesDone_);
    u.total = finished ? u.done : pieces_ < 0 ? 0 : static_cast<std::uint64_t>(std::max(pieces_, piecesDone_));
    u.unit = unit_;
  } else {
    u.done = bytesDone_;
    // The pieces to read not reached yet are taken to be as large as the mean one reached.
    const std::int64_t toRead = std::max<std::int64_t>(pieces_ - piecesUnread_, piecesSized_);
    u.total = finished || piecesSized_ == 0
                  ? bytesDone_
                  : std::max(bytesDone_, piecesSized_ >= toRead
                                             ? bytesSized_
                                             : static_cast<std::uint64_t>(static_cast<double>(bytesSized_) /
                                                                          static_cast<double>(piecesSized_) * static_cast<double>(toRead)));
  }
  u.item = item;
  // Bytes per second since the reading started: pieces done without reading before it (kept scans,
  // opened first) took time that says nothing of the download's speed. Counted from the start, a
  // long kept pass made the first lines of the download's rate far too slow and its ETA too long.
  const double seconds = std::chrono::duration<double>(now - (bytesDone_ > 0 && readStart_ ? *readStart_ : start_)).count();
  u.perSecond = seconds > 0 ? static_cast<double>(u.done) / seconds : 0;
  u.etaSeconds = finished ? 0 : u.perSecond > 0 ? static_cast<double>(u.total - u.done) / u.perSecond : -1;
  u.finished = finished;
  progress_.sink->progress(u);
}

}  // namespace stoker
