// loader_runner: runs the loader (or an auto-tune sweep) for the Loader
// workspace as a BackgroundJob and reports back through signals. Telemetry
// records wait in a bounded queue the workspace drains from its plot timer.
#pragma once

#include <QStringList>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "background_job.h"
#include "data/measure_spec.h"
#include "data/loader_options.h"
#include "telemetry/telemetry_record.h"

namespace stoker {

class LoaderSession;
class TelemetryQueue;

struct LoaderRunRequest {
  QString dataset = "fashion-mnist";  // as `stoker bench --dataset` takes it
  LoaderOptions options;
  QString devices = "cpu";            // cpu, sim:0, sim:0,sim:1, cuda:0, all
  int epochs = 0;                     // 0: until Stop
  double stepMicros = 0;              // simulated training step per batch
  MeasureSpec measure;                // sweeps and the auto-tuner: how precisely to measure each setting
  double tuneBudgetSeconds = 60;      // the auto-tuner's budget
};

struct SweepAxisText {
  QString knob;
  QString values;  // "1,2,4"
};

class LoaderRunner : public BackgroundJob {
  Q_OBJECT
 public:
  explicit LoaderRunner(QObject* parent = nullptr);
  ~LoaderRunner() override;

  // Both return false (and do nothing) while a run is in progress.
  bool start(const LoaderRunRequest& request);
  bool startSweep(const LoaderRunRequest& request, const QList<SweepAxisText>& axes);
  bool startTune(const LoaderRunRequest& request);
  std::vector<TelemetryRecord> takeTelemetry();
  // While a run (not a sweep) is in progress: hand it new options, applied
  // at its next safe point (retuned() says when). False, with the reason in
  // `error`, when no run takes them or they are invalid for it.
  bool retune(const LoaderOptions& options, QString* error);
  // While the workbench watches, loaders report at least this often.
  static constexpr int kWatchedTelemetryMs = 100;

 Q_SIGNALS:
  // `networkWorkers`: LoaderSession::networkWorkers (0 unless its batches wait on the network).
  void started(const QStringList& notes, int networkWorkers);
  void progress(qint64 done, qint64 total, double bytesPerSecond, double etaSeconds);
  // While a long open goes on (a remote WebDataset's scan, an S3 prefix's listing): bytes of shards
  // scanned, of about `total`; or, with a `unit` ("class folders listed"), a count of what it names.
  void opening(qint64 done, qint64 total, const QString& unit);
  void finished(const QString& summary, double samplesPerSecond);
  void sweepPoint(int index, int count, const QStringList& values, double samplesPerSecond, double bytesPerSecond,
                  const QString& mode, const QString& error);
  void sweepPointSpread(int index, double ciHalfWidth, double p10, double p90);
  // `similar`: rows whose 95 % interval overlaps the best's ("no clear difference").
  void sweepFinished(int bestIndex, const QList<int>& similar);
  // The auto-tuner: each trial as it is measured, then the result.
  void tuneTrial(const QString& change, double samplesPerS, double ciHalfWidth, const QString& error, double seconds);
  void tuneFinished(const QString& bestChange, const QString& bestOptionsJson, double samplesPerS, double ciHalfWidth,
                    double startSamplesPerS, const QString& confidence);
  void note(const QString& text);  // a line for the log
  // A device runs with retuned options from `unixTime` on (the telemetry clock).
  void retuned(const QString& device, const QString& change, double unixTime, bool atEpochEnd);

 private:
  std::shared_ptr<TelemetryQueue> telemetry_;
  std::mutex liveMutex_;
  LoaderSession* live_ = nullptr;  // the running session, on the job's thread
  // A change made while the run still opens (a resident dataset loading): applied when it starts.
  std::optional<LoaderOptions> pending_;
  bool opening_ = false;
};

}  // namespace stoker
