// telemetry_source: where the Monitor's records come from, as a
// BackgroundJob -- a TelemetryListener that any number of ranks connect to
// (`--publish HOST:PORT`), publishers the Monitor dials (`--publish
// listen:PORT`, for jobs behind a firewall that lets only the workstation
// connect out), or a telemetry file -- a saved session, or one a job writes
// with `--publish file:PATH` -- read and followed as it grows. Records wait
// in a bounded queue for the GUI timer; a file is read no faster than the
// GUI takes its records, so a replay loses none.
#pragma once

#include <QString>
#include <atomic>
#include <memory>
#include <vector>

#include "background_job.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class TelemetryQueue;

class TelemetrySource : public BackgroundJob {
  Q_OBJECT
 public:
  explicit TelemetrySource(QObject* parent = nullptr);
  ~TelemetrySource() override;

  // "HOST:PORT" or ":PORT" (":0" picks a free port); false while running.
  bool listen(const QString& address);
  // Dials "HOST:PORT" (again once a second while nobody answers).
  bool connectTo(const QString& address);
  // Reads the file's records, then keeps reading what is appended.
  bool follow(const QString& path);

  std::vector<TelemetryRecord> takeRecords();
  int connections() const { return connections_.load(); }
  qint64 badLines() const { return badLines_.load(); }
  qint64 dropped() const;

 Q_SIGNALS:
  void listening(int port);
  void following(const QString& path);
  void dialling(const QString& address);

 private:
  std::shared_ptr<TelemetryQueue> queue_;
  std::atomic<int> connections_{0};
  std::atomic<qint64> badLines_{0};
};

}  // namespace stoker
