#include "c_api_opening.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "util/byte_size.h"
#include "util/redacted_url.h"

namespace stoker::capi {
namespace {

std::atomic<CancelToken*> gCancel{nullptr};
volatile sig_atomic_t gInterrupted = 0;

extern "C" void onOpeningInterrupt(int) {
  gInterrupted = 1;
  if (CancelToken* token = gCancel.load()) token->cancel();  // a relaxed atomic store: async-signal-safe
}

bool onMainThread() { return ::syscall(SYS_gettid) == ::getpid(); }

}  // namespace

PythonOpening::PythonOpening(std::string spec)
    : spec_(redactedUrl(spec)), scope_({this, &cancel_}), start_(std::chrono::steady_clock::now()) {
  // Only the main thread receives Python's Ctrl-C; an open on another thread leaves the handler be.
  if (!onMainThread()) return;
  struct sigaction ours {};
  ours.sa_handler = onOpeningInterrupt;
  sigemptyset(&ours.sa_mask);
  if (::sigaction(SIGINT, nullptr, &previous_) != 0 || previous_.sa_handler == SIG_IGN) return;
  gInterrupted = 0;
  gCancel = &cancel_;
  handling_ = ::sigaction(SIGINT, &ours, nullptr) == 0;
}

PythonOpening::~PythonOpening() {
  // A failure other than Ctrl-C says itself, as the Python exception.
  if (printed_ && (opened_ || cancel_.cancelled()))
    std::fprintf(stderr, "stoker: opening %s: %s\n", spec_.c_str(), opened_ ? "done" : "stopped (Ctrl-C)");
  if (!handling_) return;
  ::sigaction(SIGINT, &previous_, nullptr);
  gCancel = nullptr;
  if (gInterrupted) ::raise(SIGINT);  // to Python's handler: KeyboardInterrupt after the call returns
}

void PythonOpening::progress(const ProgressUpdate& u) {
  if (u.finished) return;  // the destructor says it
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(2) || (printed_ && now - lastLine_ < std::chrono::seconds(10))) return;
  lastLine_ = now;
  printed_ = true;
  std::fprintf(stderr, "stoker: opening %s: %s of about %s of shards scanned, %s/s\n", spec_.c_str(),
               humanBytes(u.done).c_str(), humanBytes(u.total).c_str(),
               humanBytes(static_cast<std::uint64_t>(u.perSecond)).c_str());
}

}  // namespace stoker::capi
