#include "c_api_interrupt.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace stoker::capi {
namespace {

std::atomic<CancelToken*> gCancel{nullptr};
volatile sig_atomic_t gInterrupted = 0;

extern "C" void onInterrupt(int) {
  gInterrupted = 1;
  if (CancelToken* token = gCancel.load()) token->cancel();  // a relaxed atomic store: async-signal-safe
}

bool onMainThread() { return ::syscall(SYS_gettid) == ::getpid(); }

}  // namespace

SigintCancels::SigintCancels(CancelToken& token) {
  // Only the main thread receives Python's Ctrl-C; a call on another thread leaves the handler be.
  if (!onMainThread()) return;
  struct sigaction ours {};
  ours.sa_handler = onInterrupt;
  sigemptyset(&ours.sa_mask);
  if (::sigaction(SIGINT, nullptr, &previous_) != 0 || previous_.sa_handler == SIG_IGN || previous_.sa_handler == onInterrupt)
    return;
  gInterrupted = 0;
  gCancel = &token;
  handling_ = ::sigaction(SIGINT, &ours, nullptr) == 0;
  if (!handling_) gCancel = nullptr;
}

SigintCancels::~SigintCancels() {
  if (!handling_) return;
  ::sigaction(SIGINT, &previous_, nullptr);
  gCancel = nullptr;
  if (gInterrupted) ::raise(SIGINT);  // to Python's handler: KeyboardInterrupt after the call returns
}

}  // namespace stoker::capi
