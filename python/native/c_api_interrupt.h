// c_api_interrupt: Ctrl-C for the long C calls Python makes (a dataset's open, stoker.tune,
// stoker.ckpt.convert and verify). The script's thread waits in the C call, where Python neither
// sees a signal nor runs its handler: a KeyboardInterrupt came only once the whole call was done,
// and one raised inside a progress callback was swallowed by ctypes. While a SigintCancels lives on
// the process's main thread, SIGINT cancels its token instead (the work stops at its next safe
// point) and is raised again when it ends, so Python's own handler turns it into
// KeyboardInterrupt as the call returns. Elsewhere, or where SIGINT is ignored, it does nothing.
// One at a time: an inner call shares the outer one's token rather than making its own.
#pragma once

#include <signal.h>

#include "util/progress.h"

namespace stoker::capi {

class SigintCancels {
 public:
  explicit SigintCancels(CancelToken& token);
  ~SigintCancels();
  SigintCancels(const SigintCancels&) = delete;
  SigintCancels& operator=(const SigintCancels&) = delete;

 private:
  bool handling_ = false;  // SIGINT is ours while this lives
  struct sigaction previous_ {};
};

}  // namespace stoker::capi
