#include "c_api_opening.h"

#include <cstdio>

#include "util/byte_size.h"
#include "util/open_progress.h"
#include "util/redacted_url.h"

namespace stoker::capi {

PythonOpening::PythonOpening(std::string spec, CancelToken* shared)
    : spec_(redactedUrl(spec)),
      cancel_(shared ? shared : &own_),
      scope_({this, cancel_}),
      start_(std::chrono::steady_clock::now()) {
  if (!shared) interrupt_.emplace(own_);
}

PythonOpening::~PythonOpening() {
  // A failure other than a cancel says itself, as the Python exception.
  if (printed_ && (opened_ || cancel_->cancelled()))
    std::fprintf(stderr, "stoker: opening %s: %s\n", spec_.c_str(), opened_ ? "done" : "stopped");
}

void PythonOpening::progress(const ProgressUpdate& u) {
  if (u.finished) return;  // the destructor says it
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(2) || (printed_ && now - lastLine_ < std::chrono::seconds(10))) return;
  lastLine_ = now;
  printed_ = true;
  // Bytes come with their rate; counts say themselves.
  const std::string rate = u.unit.empty() ? ", " + humanBytes(static_cast<std::uint64_t>(u.perSecond)) + "/s" : "";
  std::fprintf(stderr, "stoker: opening %s: %s%s\n", spec_.c_str(), describeOpenProgress(u).c_str(), rate.c_str());
}

}  // namespace stoker::capi
