// loader_workspace: tune the loader interactively. Dataset and device
// pickers, the options form (presets), Run/Stop with progress, live
// per-device plots with a resident/streaming badge. The Sweep and Auto-tune
// tabs live in loader_workspace_tuning.cpp, JSON and the code exports in
// loader_workspace_export.cpp. Settings persist in QSettings.
#pragma once

#include <QMap>
#include <QWidget>

#include "data/measure_spec.h"
#include "data/loader_options.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QDoubleSpinBox;
class QTableWidget;
class QTabWidget;
class QTimer;

namespace stoker {

class DatasetPicker;
class LoaderOptionsForm;
class LoaderRunner;
class StageBreakdownView;
class TelemetryPlots;
struct LoaderRunRequest;

class LoaderWorkspace : public QWidget {
  Q_OBJECT
 public:
  explicit LoaderWorkspace(QWidget* parent = nullptr);
  ~LoaderWorkspace() override;

  LoaderOptionsForm* form() const { return form_; }
  StageBreakdownView* stages() const { return stages_; }
  TelemetryPlots* plots() const { return plots_; }
  LoaderRunner* runner() const { return runner_; }
  void setDataset(const QString& spec);
  void setImageDataset(const QString& spec);  // and default transforms when none are set
  QString dataset() const;
  void setDevices(const QString& devices);
  void setEpochs(int epochs);
  void setStepMicros(double micros);
  // Sweep axes: knob names ("" = unused) and comma-separated values.
  void setSweep(const QString& knob1, const QString& values1, const QString& knob2 = {}, const QString& values2 = {});
  QString badgeText() const;
  QString statusText() const;
  // The bottleneck panel: what limits the run now and the knob most likely to help.
  QString bottleneckText() const;
  QTableWidget* sweepTable() const { return sweepTable_; }
  int bestSweepRow() const { return bestRow_; }
  QList<int> similarSweepRows() const { return similarRows_; }  // "no clear difference" from the best
  // How precisely sweeps and the auto-tuner measure each setting.
  void setMeasurePrecision(const MeasureSpec& spec) { measure_ = spec; }
  void setTuneBudget(int seconds);
  QTableWidget* tuneTable() const { return tuneTable_; }
  // Apply (auto-tune) and Apply best (sweep) are enabled exactly when they have a setting to
  // copy that was measured on the dataset and devices now in the form.
  bool canApplyTuned() const;
  bool canApplyBestSweepRow() const;
  QString tuneSummary() const;
  // The exports: a PyTorch DataLoader, the same loader through `import stoker` (the Python
  // package, on this dataset and device), the C++ builder.
  enum class Snippet { PyTorch, Stoker, Cpp };
  QString pytorchSnippet() const;
  QString stokerSnippet() const;
  QString cppSnippet() const;
  // Writes a snippet to `path`; with a weighted sampler also the weights it loads, to
  // "<path without suffix>.weights.json". False (message in status) when the options are invalid
  // or a write fails.
  bool saveSnippet(const QString& path, Snippet kind);
  bool importOptions(const QString& path);  // false (message in status) when unreadable
  bool exportOptions(const QString& path);

 public Q_SLOTS:
  void run();
  void stop();
  void runSweep();
  void applyBestSweepRow();
  void runAutoTune();
  void applyTuned();
  void applyPreset(const QString& name);

 Q_SIGNALS:
  void runStarted();
  void runFinished(double samplesPerSecond);
  void runFailed(const QString& message);
  void runStopped();
  void sweepFinished(int bestRow);
  void tuneFinished(bool foundBetter);

 private:
  bool makeRequest(LoaderRunRequest& request);
  void buildTuningTabs(QTabWidget* tabs);  // the Sweep and Auto-tune tabs (loader_workspace_tuning.cpp)
  void connectTuning();                    // their buttons and the runner's sweep / tune reports
  void setRunning(bool running);
  void drainTelemetry();
  void clearLiveViews();
  void retuneRunningLoader();  // the form changed during a run
  void showSnippet(const QString& title, const QString& text, Snippet kind);
  QString snippetDevice() const;  // the first device of the run (the snippets drive one loader)
  QString weightsPathFor(const QString& snippetPath) const;
  void saveSettings() const;
  void restoreSettings();

  LoaderOptionsForm* form_ = nullptr;
  LoaderRunner* runner_;
  TelemetryPlots* plots_;
  StageBreakdownView* stages_ = nullptr;
  DatasetPicker* dataset_;
  QLineEdit* devices_;
  QSpinBox* epochs_;
  QDoubleSpinBox* stepMicros_;
  QComboBox* preset_;
  QPushButton* runButton_;
  QPushButton* stopButton_;
  QPushButton* sweepButton_;
  QPushButton* applyButton_;
  QProgressBar* progress_;
  QLabel* badge_;
  QLabel* status_;
  // The status line and the log show a dataset URL without its password or presigned signature
  // (the spec as run is kept whole; only what is shown is redacted, as the CLI's notes are).
  void setStatus(const QString& text);
  void appendLog(const QString& text);
  QLabel* bottleneck_;
  QString lastLiveChange_;  // shown beside the rate while a run goes until Stop
  QTimer* retuneTimer_;   // edits settle for a moment before the run takes them
  bool liveRun_ = false;
  bool openEnded_ = false;  // the last run went until Stop: its progress bar never reads 100 %  // a run (not a sweep) is in progress: form edits retune it
  LoaderOptions runOptions_;  // what the running loader was last given
  int runNetworkWorkers_ = 0;  // the workers its batches' round trips want (0: they do not wait on the network)
  QPlainTextEdit* log_;
  QComboBox* sweepKnob_[2];
  QLineEdit* sweepValues_[2];
  QTabWidget* tabs_;
  QWidget* sweepPage_;
  QWidget* tunePage_;
  QTableWidget* sweepTable_;
  QList<int> similarRows_;
  MeasureSpec measure_;
  QSpinBox* tuneBudget_;
  QPushButton* tuneButton_;
  QPushButton* applyTunedButton_;
  QLabel* tuneSummary_;
  QTableWidget* tuneTable_;
  QString tunedJson_;   // the auto-tuner's best, when it differs from where it started
  QString tunedFor_;    // dataset @ devices the auto-tuner measured
  QString sweptFor_;    // dataset @ devices the sweep measured
  QString target() const;  // dataset @ devices in the form now
  void updateApplyState();
  QTimer* drainTimer_;
  QStringList sweepAxisNames_;
  QMap<QString, QString> deviceModes_;  // the badge: latest mode of each device this run
  int bestRow_ = -1;
};

}  // namespace stoker
