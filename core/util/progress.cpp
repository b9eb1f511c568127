#include "util/progress.h"

#include "util/error.h"

namespace stoker {

void CancelToken::throwIfCancelled(const std::string& subject) const {
  if (cancelled()) throw Error(ErrorKind::Cancelled, subject, "cancelled");
}

ProgressMeter::ProgressMeter(ProgressSink* sink, std::uint64_t total, std::uint64_t alreadyDone,
                             std::chrono::milliseconds interval)
    : sink_(sink), total_(total), startDone_(alreadyDone), interval_(interval), done_(alreadyDone),
      // The first add() reports at once (a progress bar from the first chunk, and a cancel from the
      // sink is seen then: a conversion shorter than the interval could not be cancelled), the
      // later ones at most once per interval.
      start_(std::chrono::steady_clock::now()), lastEmit_() {}

void ProgressMeter::add(std::uint64_t n, const std::string& item) {
  done_ += n;
  if (!sink_) return;
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (now - lastEmit_ < interval_) return;
    lastEmit_ = now;
  }
  emit(item, false);
}

void ProgressMeter::finish() {
  if (sink_) emit("", true);
}

void ProgressMeter::emit(const std::string& item, bool finished) {
  ProgressUpdate u;
  u.done = done_.load();
  u.total = total_;
  u.item = item;
  u.finished = finished;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // The rate counts only this run's work, so a resumed conversion's ETA is honest.
  if (seconds > 0) u.perSecond = static_cast<double>(u.done - startDone_) / seconds;
  if (u.perSecond > 0 && u.total >= u.done) u.etaSeconds = static_cast<double>(u.total - u.done) / u.perSecond;
  std::lock_guard<std::mutex> lock(mutex_);
  sink_->progress(u);
}

}  // namespace stoker
