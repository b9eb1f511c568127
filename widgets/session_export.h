// session_export: the Monitor's Save session and Export (CSV) off the GUI thread. A session of a
// 256-rank job is up to 2 GiB of JSON lines: copied or converted on the GUI thread it froze the
// window for seconds to minutes, and the bounded telemetry queue dropped live records meanwhile.
// The job reads the first `bytes` of the session through a descriptor of its own (the recording
// goes on appending, and a new session may remove the file), writes the destination under a
// temporary name (util/atomic_file: a failed or cancelled write leaves no half file), and says
// how many records it wrote.
#pragma once

#include "background_job.h"

#include <QString>

namespace stoker {

class SessionExport : public BackgroundJob {
  Q_OBJECT
 public:
  using BackgroundJob::BackgroundJob;
  ~SessionExport() override;

  // The first `bytes` of the session recorded at `session` copied to `path`, as recorded; false
  // while a job runs or when the session cannot be opened (it is opened here, on the caller's
  // thread, so its removal by a new session does not matter).
  bool saveCopy(const QString& session, qint64 bytes, const QString& path);
  // The same records as CSV rows under telemetryCsvHeader().
  bool saveCsv(const QString& session, qint64 bytes, const QString& path);

 Q_SIGNALS:
  void written(const QString& path, qint64 records);

 private:
  bool start(const QString& session, qint64 bytes, const QString& path, bool csv);
};

}  // namespace stoker
