#include "checkpoint_jobs.h"

#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "ckpt/verify.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/open_progress.h"
#include "util/progress.h"

namespace stoker {
namespace {

class SignalProgress : public ProgressSink {
 public:
  explicit SignalProgress(CheckpointJobs* jobs) : jobs_(jobs) {}
  void progress(const ProgressUpdate& u) override {
    Q_EMIT jobs_->progress(static_cast<qint64>(u.done), static_cast<qint64>(u.total), u.perSecond, u.etaSeconds,
                           QString::fromStdString(u.item));
  }
  void note(const std::string& text) override { Q_EMIT jobs_->note(QString::fromStdString(text)); }

 private:
  CheckpointJobs* jobs_;
};

QString hb(std::uint64_t n) { return QString::fromStdString(humanBytes(n)); }

// The options the settings give, read in one place for the plan check and the conversion.
ConvertOptions convertOptions(const ConvertSettings& s) {
  ConvertOptions o;
  o.memoryBudget = parseByteSize(s.memoryBudget.toStdString(), "memory budget");
  o.jobs = s.jobs;
  o.force = s.force;
  return o;
}

}  // namespace

CheckpointJobs::CheckpointJobs(QObject* parent) : BackgroundJob(parent) {}
CheckpointJobs::~CheckpointJobs() { stopAndWait(); }

std::shared_ptr<const CheckpointInfo> CheckpointJobs::source() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return source_;
}

std::shared_ptr<const ReshardPlan> CheckpointJobs::lastPlan() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plan_;
}

bool CheckpointJobs::open(const QString& path) {
  return launch([this, path] {
    {
      // The checkpoint open before is closed now: an open that fails or is cancelled leaves none,
      // so no later Convert or Verify acts on it under this path's name.
      std::lock_guard<std::mutex> lock(mutex_);
      source_.reset();
      plan_.reset();
    }
    // Cancel (and closing the window) stops a remote inspect's requests, also one in flight on a
    // server that stopped answering (without it, up to every retry's stall timeout: minutes).
    OpenProgressScope cancellable({nullptr, cancelToken()});
    auto info = std::make_shared<CheckpointInfo>(inspectCheckpoint(path.toStdString()));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      source_ = info;
      plan_.reset();
    }
    QString summary = QString("%1: %2, %3 tensors, %4 in %5 file(s)")
                          .arg(path, QString::fromStdString(formatName(info->format)))
                          .arg(info->tensors.size())
                          .arg(hb(info->totalBytes()))
                          .arg(info->files.size());
    if (info->worldSize) summary += QString(", %1 ranks").arg(*info->worldSize);
    if (!info->nonTensorItems.empty())
      summary += QString(", %1 non-tensor item(s) (kept by a DCP target, left out by the others)").arg(info->nonTensorItems.size());
    if (!info->problems.empty()) summary += QString(", %1 problem(s)").arg(info->problems.size());
    markIdle();
    Q_EMIT opened(summary);
  });
}

std::shared_ptr<const ReshardPlan> CheckpointJobs::makePlan(const ConvertSettings& s) const {
  auto src = source();
  if (!src) throwBadInput("convert", "open a checkpoint first");
  requireConsistent(*src);
  auto plan = std::make_shared<ReshardPlan>(planReshard(*src, parseTargetSpec(s.target.toStdString(), s.dtype.toStdString())));
  validateConvertOptions(*plan, convertOptions(s));
  return plan;
}

bool CheckpointJobs::plan(const ConvertSettings& settings) {
  return launch([this, settings] {
    auto plan = makePlan(settings);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      plan_ = plan;
    }
    QStringList lines;
    lines << QString("dry run: %1 -> %2 file(s), %3 (largest tensor %4)")
                 .arg(QString::fromStdString(targetName(plan->target)))
                 .arg(plan->files.size())
                 .arg(hb(plan->totalBytes()))
                 .arg(hb(plan->largestTensorBytes()));
    for (const auto& f : plan->files)
      lines << QString("  %1: %2 tensors, %3").arg(QString::fromStdString(f.name)).arg(f.tensors.size()).arg(hb(f.fileBytes));
    if (!plan->indexName.empty()) lines << QString("  %1 (written last)").arg(QString::fromStdString(plan->indexName));
    markIdle();
    Q_EMIT planned(lines.join('\n'));
  });
}

bool CheckpointJobs::convert(const ConvertSettings& settings, bool resume) {
  return launch([this, settings, resume] {
    auto plan = makePlan(settings);
    if (settings.destination.trimmed().isEmpty()) throwBadInput("convert", "choose a destination folder");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      plan_ = plan;
    }
    SignalProgress sink(this);
    ConvertOptions o = convertOptions(settings);
    o.resume = resume;
    o.progress = &sink;
    o.cancel = cancelToken();
    const ConvertReport r = convertCheckpoint(*source(), *plan, settings.destination.toStdString(), o);
    QString summary = QString("converted to %1: %2 file(s) written, %3 already done, %4 in %5 s")
                          .arg(settings.destination)
                          .arg(r.written.size())
                          .arg(r.alreadyDone.size())
                          .arg(hb(r.bytesWritten))
                          .arg(r.seconds, 0, 'f', 2);
    for (const auto& [name, overflow] : r.f16Overflows)
      summary += QString("\nwarning: %1: values beyond the f16 range became infinities").arg(QString::fromStdString(name));
    markIdle();
    Q_EMIT converted(summary, r.complete);
  });
}

bool CheckpointJobs::verify(const QString& destination) {
  return launch([this, destination] {
    auto src = source();
    if (!src) throwBadInput("verify", "open a checkpoint first");
    const CheckpointInfo dst = inspectCheckpoint(destination.toStdString());
    SignalProgress sink(this);
    VerifyOptions o;
    o.progress = &sink;
    o.cancel = cancelToken();
    const VerifyResult r = verifyCheckpoints(*src, dst, o);
    const QString verdict =
        r.equal ? QString("Same model: %1 tensors have identical names, dtypes, shapes and bytes.").arg(r.tensorsCompared)
                : QString("Different: %1: %2").arg(QString::fromStdString(r.tensor), QString::fromStdString(r.reason));
    markIdle();
    Q_EMIT verified(r.equal, verdict);
  });
}

}  // namespace stoker
