// ckpt/convert_journal: what lets `--resume` finish an interrupted conversion
// and lets several processes (--rank/--world-size) share one. It lives in
// DST/.stoker-journal/: `plan` holds the fingerprint of the conversion
// (source files, target, every output's layout); each process appends
// "<bytes> <file>" lines to its own `done-*` log after the file is fsynced and
// renamed into place. A file counts as done when a log lists it and it has
// exactly that size on disk. A finished conversion removes the journal and
// leaves its fingerprint in DST's extended attribute user.stoker.conversion,
// so that a later --resume can tell a finished conversion of this source from
// one of another (where the file system keeps no xattrs, sizes are all it has).
// A file whose values overflowed F16 leaves `f16-<file>` beside its done line, so
// the run that finishes a resumed conversion still warns about the files an
// earlier, interrupted run wrote.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ckpt/dtype_convert.h"
#include "ckpt/reshard_plan.h"

namespace stoker {

// Identifies a conversion: changes when the source files (size, mtime),
// the target or the planned layout change.
std::string conversionFingerprint(const CheckpointInfo& source, const ReshardPlan& plan);

class ConvertJournal {
 public:
  static std::string directory(const std::string& dst);  // DST/.stoker-journal

  explicit ConvertJournal(std::string dst);
  ~ConvertJournal();
  ConvertJournal(const ConvertJournal&) = delete;
  ConvertJournal& operator=(const ConvertJournal&) = delete;

  // The fingerprint recorded in DST, or "" when there is none.
  std::string recordedFingerprint() const;
  // Records the fingerprint (atomically; every process writes the same bytes).
  void start(const std::string& fingerprint, const std::string& description);
  // Files every process has finished, verified against their size on disk.
  std::map<std::string, std::uint64_t> finishedFiles() const;
  // Appends to this process's log and fsyncs it.
  void markDone(const std::string& file, std::uint64_t bytes);
  // Records the F16 overflows of `file` (before markDone: a kill in between rewrites both).
  void recordOverflows(const std::string& file, const std::map<std::string, F16Overflow>& byTensor);
  // What recordOverflows kept for `file` (empty when none overflowed or nothing was kept).
  std::map<std::string, F16Overflow> recordedOverflows(const std::string& file) const;
  // Once the conversion is complete: records `fingerprint` on DST (best effort), then removes the
  // journal.
  void finish(const std::string& fingerprint);
  // The fingerprint a finished conversion recorded on `dst`, or "" when there is none (never
  // finished, started again since, or a file system without user xattrs).
  static std::string finishedFingerprint(const std::string& dst);

 private:
  std::string dst_;
  std::string dir_;
  int logFd_ = -1;
  std::string logName_;
};

}  // namespace stoker
