// c_api_opening: a dataset opened from Python (stoker_loader_open) says how far a long open is
// and stops on Ctrl-C. The script's thread waits in the C call, where Python neither prints nor
// sees a signal: while this lives on the process's main thread, SIGINT cancels the open
// (util/open_progress; a remote WebDataset's scan stops at its next block) and is raised again at
// the end, so Python's own handler turns it into KeyboardInterrupt once the call returns. Progress
// goes to stderr as "stoker: opening ..." lines once the open has taken 2 s, then every 10 s, and
// a last one.
#pragma once

#include <chrono>
#include <mutex>
#include <signal.h>
#include <string>

#include "util/open_progress.h"

namespace stoker::capi {

class PythonOpening : public ProgressSink {
 public:
  explicit PythonOpening(std::string spec);
  ~PythonOpening() override;
  PythonOpening(const PythonOpening&) = delete;
  PythonOpening& operator=(const PythonOpening&) = delete;
  void progress(const ProgressUpdate& u) override;
  void opened() { opened_ = true; }  // the last line then says "done"

 private:
  std::string spec_;  // without its URL's secrets
  CancelToken cancel_;
  OpenProgressScope scope_;
  bool handling_ = false;  // SIGINT is ours while the open runs
  struct sigaction previous_ {};
  std::chrono::steady_clock::time_point start_, lastLine_{};
  bool printed_ = false, opened_ = false;
  std::mutex mutex_;
};

}  // namespace stoker::capi
