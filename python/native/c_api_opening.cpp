#include "c_api_opening.h"

#include <cstdio>

#include "util/byte_size.h"
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
  if (u.unit.empty())
    std::fprintf(stderr, "stoker: opening %s: %s of about %s downloaded, %s/s\n", spec_.c_str(),
                 humanBytes(u.done).c_str(), humanBytes(u.total).c_str(),
                 humanBytes(static_cast<std::uint64_t>(u.perSecond)).c_str());
  else if (u.total == 0)  // a count whose total is not known ("12000 objects listed")
    std::fprintf(stderr, "stoker: opening %s: %llu %s\n", spec_.c_str(), static_cast<unsigned long long>(u.done), u.unit.c_str());
  else  // no bytes read: what is done, counted ("12 of 1000 class folders listed")
    std::fprintf(stderr, "stoker: opening %s: %llu of %llu %s\n", spec_.c_str(), static_cast<unsigned long long>(u.done),
                 static_cast<unsigned long long>(u.total), u.unit.c_str());
}

}  // namespace stoker::capi
