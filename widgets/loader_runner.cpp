#include "loader_runner.h"

#include <QMetaObject>

#include <algorithm>
#include <functional>

#include "data/dataset.h"
#include "data/loader_session.h"
#include "data/loader_sweep.h"
#include "data/loader_tune.h"
#include "telemetry/telemetry_queue.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/open_progress.h"
#include "util/progress.h"

namespace stoker {
namespace {

// Core progress, forwarded as a queued signal (the meter throttles to 20 Hz).
class SignalProgress : public ProgressSink {
 public:
  explicit SignalProgress(LoaderRunner* runner) : runner_(runner) {}
  void progress(const ProgressUpdate& u) override {
    Q_EMIT runner_->progress(static_cast<qint64>(u.done), static_cast<qint64>(u.total), u.perSecond, u.etaSeconds);
  }

 private:
  LoaderRunner* runner_;
};

// A long open's progress (util/open_progress), as the opening signal.
class OpeningSignal : public ProgressSink {
 public:
  explicit OpeningSignal(LoaderRunner* runner) : runner_(runner) {}
  void progress(const ProgressUpdate& u) override {
    if (!u.finished)
      Q_EMIT runner_->opening(static_cast<qint64>(u.done), static_cast<qint64>(u.total), QString::fromStdString(u.unit));
  }

 private:
  LoaderRunner* runner_;
};

// A long open (a remote WebDataset's scan) shows in the status line, and Stop ends it.
std::shared_ptr<Dataset> openShowingProgress(LoaderRunner* runner, const std::string& spec, const LoaderOptions& o,
                                             const CancelToken* cancel) {
  OpeningSignal opening(runner);
  OpenProgressScope scope({&opening, cancel});
  return openDataset(spec, o);
}

// Opens `spec` again with other reader settings (a live retune's, a sweep row's, an auto-tune
// trial's), as the first open was.
std::function<std::shared_ptr<Dataset>(const LoaderOptions&)> reopener(LoaderRunner* runner, std::string spec, const CancelToken* cancel) {
  return [runner, spec = std::move(spec), cancel](const LoaderOptions& o) { return openShowingProgress(runner, spec, o, cancel); };
}

LoaderSessionOptions sessionOptions(const LoaderRunRequest& r, const std::shared_ptr<TelemetryQueue>& telemetry) {
  LoaderSessionOptions s;
  s.epochs = r.epochs;
  s.stepMicros = r.stepMicros;
  s.sim.capacityBytes = 16LL << 30;  // `stoker bench`'s default simulated device
  if (telemetry) s.observers.push_back(telemetry);
  return s;
}

QString summaryText(const LoaderSessionResult& result) {
  QStringList lines;
  for (const auto& d : result.devices)
    lines << QString("%1: %2, depth %3, %4 samples/s, %5/s")
                 .arg(QString::fromStdString(d.device), QString::fromStdString(loadingModeName(d.mode)))
                 .arg(d.prefetchDepth)
                 .arg(d.samplesPerS, 0, 'f', 0)
                 .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(d.bytesPerS))));
  lines << QString("steady state: %1 samples/s, %2/s")
               .arg(result.samplesPerS, 0, 'f', 0)
               .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(result.bytesPerS))));
  return lines.join('\n');
}

}  // namespace

LoaderRunner::LoaderRunner(QObject* parent) : BackgroundJob(parent), telemetry_(std::make_shared<TelemetryQueue>()) {}

LoaderRunner::~LoaderRunner() { stopAndWait(); }

std::vector<TelemetryRecord> LoaderRunner::takeTelemetry() { return telemetry_->takeAll(); }

bool LoaderRunner::start(const LoaderRunRequest& request) {
  if (busy()) return false;  // launch() would refuse too; the running job's state stays as it is
  {
    std::lock_guard<std::mutex> lock(liveMutex_);
    pending_.reset();
    opening_ = true;
  }
  const bool launched = launch([this, request] {
    struct Live {  // retune() reaches the session only while run() runs, and queues while it opens
      LoaderRunner* runner;
      ~Live() {
        std::lock_guard<std::mutex> lock(runner->liveMutex_);
        runner->live_ = nullptr;
        runner->opening_ = false;
        runner->pending_.reset();
      }
    } live{this};
    const auto devices = expandDevices(request.devices.toStdString());
    const std::string spec = request.dataset.toStdString();
    // The plots want points several times a second, even from short epochs.
    LoaderOptions options = request.options;
    options.telemetry_interval_ms = std::min(options.telemetry_interval_ms, kWatchedTelemetryMs);
    const std::shared_ptr<Dataset> dataset = openShowingProgress(this, spec, options, cancelToken());
    LoaderSessionOptions so = sessionOptions(request, telemetry_);
    so.reopen = reopener(this, spec, cancelToken());
    so.openCancel = cancelToken();  // Stop while a resident dataset decodes
    so.onRetuned = [this](const RetuneApplied& a) {
      Q_EMIT retuned(QString::fromStdString(a.device), QString::fromStdString(a.change), a.time, a.atEpochEnd);
    };
    LoaderSession session(dataset, options, devices, so);
    // Declared after the session, so destroyed before it: retune() from the GUI thread never
    // reaches a session being destroyed. (Live, above, clears live_ only once the session and the
    // dataset are gone; a Stop or an error while a retune was due wrote into the dead session.)
    struct Unpublish {
      LoaderRunner* runner;
      ~Unpublish() {
        std::lock_guard<std::mutex> lock(runner->liveMutex_);
        runner->live_ = nullptr;
      }
    } unpublish{this};
    QStringList notes;
    for (const auto& n : session.notes()) notes << QString::fromStdString(n);
    if (options.telemetry_interval_ms != request.options.telemetry_interval_ms)
      notes << tr("telemetry every %1 ms while the workbench watches").arg(options.telemetry_interval_ms);
    Q_EMIT started(notes, session.networkWorkers());
    SignalProgress progress(this);
    {
      std::lock_guard<std::mutex> lock(liveMutex_);
      live_ = &session;
      opening_ = false;
      if (pending_) {  // edited while opening: the first batch takes it, with its marker
        try {
          session.retune(*pending_);
        } catch (const Error& e) {
          Q_EMIT note(tr("cannot apply the change made while opening: %1").arg(QString::fromStdString(e.what())));
        }
        pending_.reset();
      }
    }
    const LoaderSessionResult result = session.run(&progress, cancelToken());
    markIdle();
    Q_EMIT finished(summaryText(result), result.samplesPerS);
  });
  if (!launched) {  // another job runs: nothing opens
    std::lock_guard<std::mutex> lock(liveMutex_);
    opening_ = false;
  }
  return launched;
}

bool LoaderRunner::startTune(const LoaderRunRequest& request) {
  return launch([this, request] {
    const auto devices = expandDevices(request.devices.toStdString());
    const std::shared_ptr<Dataset> dataset = openShowingProgress(this, request.dataset.toStdString(), request.options, cancelToken());
    Q_EMIT started({}, 0);  // the panel speaks only for a live run
    TuneSpec spec;
    spec.budgetSeconds = request.tuneBudgetSeconds;
    spec.measure = request.measure;
    const std::string datasetSpec = request.dataset.toStdString();
    spec.remoteDataset = datasetIsRemote(datasetSpec);
    spec.reopen = reopener(this, datasetSpec, cancelToken());
    const TuneResult r = autoTune(dataset, request.options, devices, sessionOptions(request, telemetry_), spec, cancelToken(),
                                  [this, &spec](const TuneTrial& t, double seconds) {
                                    Q_EMIT tuneTrial(QString::fromStdString(t.change), t.measurement.samplesPerS,
                                                     t.measurement.ciHalfWidth, QString::fromStdString(t.error), seconds);
                                    Q_EMIT progress(static_cast<qint64>(std::min(seconds, spec.budgetSeconds) * 1000),
                                                    static_cast<qint64>(spec.budgetSeconds * 1000), 0, -1);
                                  });
    markIdle();
    Q_EMIT tuneFinished(QString::fromStdString(r.bestChange), QString::fromStdString(loaderOptionsToJson(r.best)),
                        r.bestMeasurement.samplesPerS, r.bestMeasurement.ciHalfWidth, r.startMeasurement.samplesPerS,
                        QString::fromStdString(r.confidence));
  });
}

bool LoaderRunner::retune(const LoaderOptions& options, QString* error) {
  std::lock_guard<std::mutex> lock(liveMutex_);
  LoaderOptions o = options;
  o.telemetry_interval_ms = std::min(o.telemetry_interval_ms, kWatchedTelemetryMs);
  if (!live_) {
    if (opening_) {  // still opening: kept for the start
      try {
        validateLoaderOptions(o);
      } catch (const Error& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
      }
      pending_ = o;
      return true;
    }
    if (error) *error = tr("no run is in progress");
    return false;
  }
  try {
    live_->retune(o);
    return true;
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool LoaderRunner::startSweep(const LoaderRunRequest& request, const QList<SweepAxisText>& axesText) {
  return launch([this, request, axesText] {
    std::vector<SweepAxis> axes;
    for (const auto& a : axesText)
      if (!a.knob.isEmpty()) axes.push_back(parseSweepAxis(a.knob.toStdString(), a.values.toStdString()));
    sweepPoints(request.options, axes);  // refuse a bad axis before opening the dataset
    const auto devices = expandDevices(request.devices.toStdString());
    const std::string spec = request.dataset.toStdString();
    Q_EMIT started({}, 0);  // the panel speaks only for a live run
    // Sweep points publish no telemetry: their plots would interleave.
    const SweepResult result =
        runSweep(reopener(this, spec, cancelToken()), request.options, axes, devices, sessionOptions(request, telemetry_),
                 request.measure, cancelToken(),
                 [this](const SweepPoint& p, int index, int count) {
                   if (p.reopened) Q_EMIT note(tr("sweep row %1: dataset opened again for its reader settings").arg(index + 1));
                   QStringList values;
                   for (const auto& v : p.values) values << QString::fromStdString(v);
                   Q_EMIT sweepPoint(index, count, values, p.samplesPerS, p.bytesPerS, QString::fromStdString(p.mode),
                                     QString::fromStdString(p.error));
                   Q_EMIT sweepPointSpread(index, p.measurement.ciHalfWidth, p.measurement.p10, p.measurement.p90);
                   Q_EMIT progress(index + 1, count, 0, -1);
                 });
    markIdle();
    QList<int> similar;
    for (int i = 0; i < static_cast<int>(result.points.size()); ++i)
      if (result.points[static_cast<std::size_t>(i)].noClearDifference) similar << i;
    Q_EMIT sweepFinished(result.bestIndex, similar);
  });
}

}  // namespace stoker
