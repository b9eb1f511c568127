// c_api_opening: a dataset opened from Python (stoker_loader_open, stoker.tune and its trials'
// re-opens) says how far a long open is and stops on Ctrl-C (c_api_interrupt: a remote
// WebDataset's scan stops at its next block, and Python raises KeyboardInterrupt once the call
// returns). Progress goes to stderr as "stoker: opening ..." lines once the open has taken 2 s,
// then every 10 s, and a last one.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "c_api_interrupt.h"
#include "util/open_progress.h"

namespace stoker::capi {

class PythonOpening : public ProgressSink {
 public:
  // `shared`: the token of a longer call around the open (stoker.tune's), whose SigintCancels
  // covers the open too; without one, the open has its own token and takes Ctrl-C itself.
  explicit PythonOpening(std::string spec, CancelToken* shared = nullptr);
  ~PythonOpening() override;
  PythonOpening(const PythonOpening&) = delete;
  PythonOpening& operator=(const PythonOpening&) = delete;
  void progress(const ProgressUpdate& u) override;
  void opened() { opened_ = true; }  // the last line then says "done"

 private:
  std::string spec_;  // without its URL's secrets
  CancelToken own_;
  CancelToken* cancel_;  // own_ or the shared one
  std::optional<SigintCancels> interrupt_;  // with its own token
  OpenProgressScope scope_;
  std::chrono::steady_clock::time_point start_, lastLine_{};
  bool printed_ = false, opened_ = false;
  std::mutex mutex_;
};

}  // namespace stoker::capi
