// checkpoints_workspace: open a checkpoint (dialog, recent list, or drag and
// drop), browse its tensors as a tree with problems flagged, see the
// selected tensor's source and target shards, set the target layout, dry-run,
// convert with progress/rate/ETA, cancel, resume, and verify with a verdict.
#pragma once

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTreeWidget;
class QTreeWidgetItem;

namespace stoker {

class CheckpointJobs;
class ShardLayoutView;
struct ConvertSettings;

class CheckpointsWorkspace : public QWidget {
  Q_OBJECT
 public:
  explicit CheckpointsWorkspace(QWidget* parent = nullptr);
  ~CheckpointsWorkspace() override;

  CheckpointJobs* jobs() const { return jobs_; }
  QTreeWidget* tree() const { return tree_; }
  ShardLayoutView* layoutView() const { return layoutView_; }
  QString verdictText() const;
  QString statusText() const;
  // A conversion (or its resume) is under way: closing the window would stop it.
  bool converting() const;
  QString logText() const;
  QStringList recentFiles() const;
  // Where a conversion of `source` goes unless the user says: beside a local source, in the working
  // directory for a URL.
  static QString defaultDestination(const QString& source);
  void setTarget(const QString& target, const QString& dtype = "keep");  // "ranks:3", "hf:1MB", "single", "pt"
  void setDestination(const QString& dir);
  void setMemoryBudget(const QString& size);
  void setJobs(int jobs);
  void setForce(bool force);
  void selectTensor(const QString& name);

 public Q_SLOTS:
  void openPath(const QString& path);
  void openDialog();
  void dryRun();
  void convert();
  void resume();
  void cancel();
  void verify();

 Q_SIGNALS:
  void checkpointOpened(const QString& summary);
  void planReady();
  void conversionFinished(bool complete);
  void verifyFinished(bool equal);
  void jobFailed(const QString& message);
  void jobStopped();

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  ConvertSettings settings() const;
  void startConvert(bool resume);
  void fillTree();
  void showLayout();
  void setBusy(bool busy, const QString& what = {});
  void log(const QString& text);
  void rememberRecent(const QString& path);
  void updateTargetWidgets();
  void saveSettings() const;

  CheckpointJobs* jobs_;
  QLineEdit* path_;
  QPushButton* recentButton_;
  QTreeWidget* tree_;
  ShardLayoutView* layoutView_;
  QComboBox* targetKind_;
  QSpinBox* ranks_;
  QLineEdit* hfMax_;
  QComboBox* dtype_;
  QLineEdit* budget_;
  QSpinBox* jobsSpin_;
  QLineEdit* destination_;
  QCheckBox* force_;
  QPushButton* dryRunButton_;
  QPushButton* convertButton_;
  QPushButton* resumeButton_;
  QPushButton* cancelButton_;
  QPushButton* verifyButton_;
  QProgressBar* progress_;
  QLabel* rate_;
  QLabel* status_;
  QLabel* verdict_;
  QPlainTextEdit* log_;
  QString openedPath_;
  // The destination this workspace filled in for the open checkpoint: replaced by the next one's
  // while the user has not typed another (B was written into A-converted, over A's output).
  QString defaultedDestination_;
  // What a Cancel stopped, for its message (only a conversion leaves something to resume).
  enum class JobKind { Open, Plan, Convert, Verify } lastJob_ = JobKind::Open;
};

}  // namespace stoker
