// checkpoint_jobs: the Checkpoints workspace's long work -- inspect, plan
// (dry run), convert and verify -- as a BackgroundJob. Results are kept here
// (the inspected source and the last plan, shared read-only with the GUI
// once the signal arrives); the GUI never touches checkpoint bytes.
#pragma once

#include <QString>
#include <QStringList>
#include <memory>
#include <mutex>

#include "background_job.h"

namespace stoker {

struct CheckpointInfo;
struct ReshardPlan;

struct ConvertSettings {
  QString target = "ranks:2";  // ranks:M, hf[:SIZE], single, pt
  QString dtype = "keep";      // keep, f32, f16, bf16
  QString memoryBudget = "256MiB";
  int jobs = 2;
  QString destination;
  bool force = false;
};

class CheckpointJobs : public BackgroundJob {
  Q_OBJECT
 public:
  explicit CheckpointJobs(QObject* parent = nullptr);
  ~CheckpointJobs() override;

  // Each returns false while another job runs.
  bool open(const QString& path);
  bool plan(const ConvertSettings& settings);
  bool convert(const ConvertSettings& settings, bool resume);
  bool verify(const QString& destination);

  std::shared_ptr<const CheckpointInfo> source() const;
  std::shared_ptr<const ReshardPlan> lastPlan() const;

 Q_SIGNALS:
  void opened(const QString& summary);
  void planned(const QString& text);
  void progress(qint64 done, qint64 total, double bytesPerSecond, double etaSeconds, const QString& item);
  void note(const QString& text);
  void converted(const QString& summary, bool complete);
  void verified(bool equal, const QString& verdict);

 private:
  std::shared_ptr<const ReshardPlan> makePlan(const ConvertSettings& settings) const;

  mutable std::mutex mutex_;
  std::shared_ptr<const CheckpointInfo> source_;
  std::shared_ptr<const ReshardPlan> plan_;
};

}  // namespace stoker
