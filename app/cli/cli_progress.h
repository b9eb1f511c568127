// cli_progress: the progress line of long commands on stderr (redrawn in
// place on a terminal, one line every few seconds otherwise) and Ctrl-C as
// a cooperative cancel.
#pragma once

#include <chrono>
#include <string>

#include "util/open_progress.h"
#include "util/progress.h"

namespace stoker {

class TerminalProgress : public ProgressSink {
 public:
  explicit TerminalProgress(std::string verb, bool quiet = false);
  ~TerminalProgress() override;
  void progress(const ProgressUpdate& u) override;
  void note(const std::string& text) override;

 private:
  std::string verb_;
  bool quiet_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point lastLine_{};
};

// The first SIGINT/SIGTERM cancels `token` (work stops at a safe point); a
// second one ends the process the usual way.
void cancelOnInterrupt(CancelToken& token);

// While it lives, a dataset opened on this thread says how far a long open is (a remote
// WebDataset's scan downloads the shards) on stderr as "open ..." lines, unless quiet, and stops
// once `cancel` is cancelled (util/open_progress). An open done within a second says nothing.
class OpeningProgress : public ProgressSink {
 public:
  OpeningProgress(bool quiet, const CancelToken* cancel)
      : terminal_("open", quiet), start_(std::chrono::steady_clock::now()), scope_({this, cancel}) {}
  void progress(const ProgressUpdate& u) override {
    if (!shown_ && std::chrono::steady_clock::now() - start_ < std::chrono::seconds(1)) return;
    shown_ = true;
    terminal_.progress(u);
  }

 private:
  TerminalProgress terminal_;
  std::chrono::steady_clock::time_point start_;
  bool shown_ = false;  // the meter calls one at a time
  OpenProgressScope scope_;
};

}  // namespace stoker
