// planner_workspace: the Planner -- world size, weights or step times,
// batch, seed, epoch, drop/pad and a resume point in; the plan out as a
// ranks x steps grid, a per-rank table with the imbalance, and a preview of
// the epoch resumed on another world size. Plans run off the GUI thread
// (10M samples take ~0.5 s); stale results are dropped.
#pragma once

#include <QFutureWatcher>
#include <QString>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTableView;
class QTimer;

namespace stoker {

class PlanGridView;
class PlanRowsModel;
struct PlannerResult;

struct PlannerInputs {
  qint64 samples = 60000;
  int worldSize = 4;
  qint64 batchSize = 256;
  qint64 seed = 0;
  qint64 epoch = 0;
  bool shuffle = true;
  bool dropLast = false;
  QString policy = "torch";  // torch, weighted or el_che
  QString weights;           // "w0,w1,..." (weighted)
  QString stepMs;            // "t0,t1,..." (el_che)
  qint64 resumeFrom = 0;  // samples of the epoch done; 0 (the default, valid for any size): no resume preview
  int resumeWorldSize = 3;
};

class PlannerWorkspace : public QWidget {
  Q_OBJECT
 public:
  explicit PlannerWorkspace(QWidget* parent = nullptr);
  ~PlannerWorkspace() override;

  PlannerInputs inputs() const;
  void setInputs(const PlannerInputs& in);  // re-plans
  bool busy() const;
  QString errorText() const;
  // The header line over the grid (policy, counts, how the split matches what was asked).
  QString summaryText() const;
  // True while the form holds an invalid value: the plan on screen is the last valid one,
  // greyed, and the header says so.
  bool planIsStale() const { return stale_; }
  // Weights proportional to measured samples/s ("1200,600,..."); false and
  // an error shown when the text is not a list of positive numbers.
  bool setWeightsFromThroughput(const QString& samplesPerSecond);

 public Q_SLOTS:
  void replan();

 Q_SIGNALS:
  void planReady();
  void planFailed(const QString& message);

 private:
  void showResult(const PlannerResult& r);
  void showError(const QString& message);

  QSpinBox *samples_, *world_, *batch_, *seed_, *epoch_, *resumeFrom_, *resumeWorld_;
  QLineEdit *weights_, *stepMs_, *throughput_;
  QCheckBox *shuffle_, *dropLast_;
  bool stale_ = false;
  QString lastSummary_;  // the last valid plan's header, quoted while the form is invalid
  QComboBox* policy_;
  QLabel *summary_, *error_;
  QTableView* table_;
  PlanRowsModel* rows_;
  PlanGridView *grid_, *resumeGrid_;
  QTimer* debounce_;
  QFutureWatcher<PlannerResult>* watcher_;
  bool pending_ = false;
  bool loading_ = false;
};

}  // namespace stoker
