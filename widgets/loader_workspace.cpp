#include "loader_workspace.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <thread>

#include "background_settings.h"
#include "dataset_picker.h"
#include "form_scroll_area.h"
#include "loader_options_form.h"
#include "loader_runner.h"
#include "data/dataset.h"
#include "stage_breakdown_view.h"
#include "telemetry_plots.h"
#include "eta_text.h"
#include "data/bottleneck.h"
#include "net/remote_url.h"
#include "util/byte_size.h"
#include "util/open_progress.h"
#include "util/error.h"
#include "util/redacted_url.h"

namespace stoker {
namespace {

const char* kPresets[] = {"gpu_optimized", "distributed_optimized", "debug_mode"};

}  // namespace

LoaderWorkspace::LoaderWorkspace(QWidget* parent)
    : QWidget(parent), runner_(new LoaderRunner(this)), retuneTimer_(new QTimer(this)), drainTimer_(new QTimer(this)) {
  auto* split = new QSplitter(this);
  auto* outer = new QHBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(split);

  // Left: what to load and how.
  auto* left = new QWidget;
  auto* leftLayout = new QVBoxLayout(left);
  auto* data = new QGroupBox(tr("Data"), left);
  auto* dataForm = new QFormLayout(data);
  dataset_ = new DatasetPicker(data);
  dataset_->setObjectName("dataset");
  {
    QStringList kinds;
    for (const auto& k : datasetKinds()) kinds << QString::fromStdString(k);
    dataset_->setToolTip(tr("A dataset spec, one of:\n%1\nor pick \"Image folder…\", \"Token file…\" and the others "
                            "from the list. Image datasets take their transforms from the transforms knob.")
                             .arg(kinds.join('\n')));
  }
  connect(dataset_, &QComboBox::editTextChanged, this, [this] {
    const bool remote = datasetIsRemote(dataset_->spec().toStdString());
    if (form_) form_->setRemoteDataset(remote);
    if (stages_) stages_->setReadIsNetwork(remote);
    updateApplyState();
  });
  connect(dataset_, &DatasetPicker::browsed, this, [this](const QString& spec, bool images) {
    if (images) setImageDataset(spec);
    else setDataset(spec);
  });
  dataForm->addRow(tr("Dataset"), dataset_);
  devices_ = new QLineEdit("cpu", data);
  devices_->setObjectName("devices");
  devices_->setToolTip(tr("cpu, sim:0 (a simulated GPU), sim:0,sim:1 (one loader per device, each on its shard), "
                          "cuda:0, or all"));
  dataForm->addRow(tr("Devices"), devices_);
  // On cpu alone nothing is copied to a device: the form greys out the copy knobs.
  connect(devices_, &QLineEdit::textChanged, this, [this](const QString& text) {
    bool host = true;
    for (const QString& d : text.split(',', Qt::SkipEmptyParts)) host = host && d.trimmed() == "cpu";
    form_->setHostDevice(host);
    updateApplyState();
  });
  epochs_ = new QSpinBox(data);
  epochs_->setRange(0, 1000);
  epochs_->setSpecialValueText(tr("until Stop"));  // 0
  epochs_->setValue(0);
  epochs_->setToolTip(tr("Epochs per run, or until Stop: the loader keeps running and every change in the form "
                         "takes effect live. The steady-state rate counts the epochs after the first since the "
                         "last change"));
  dataForm->addRow(tr("Epochs"), epochs_);
  stepMicros_ = new QDoubleSpinBox(data);
  stepMicros_->setRange(0, 1e6);
  stepMicros_->setDecimals(0);
  stepMicros_->setSuffix(" µs");
  stepMicros_->setToolTip(tr("Simulated training step per batch (busy work on the consumer), so the plots show how "
                             "much input headroom a model of that speed leaves"));
  dataForm->addRow(tr("Step"), stepMicros_);
  leftLayout->addWidget(data);

  auto* optionsBox = new QGroupBox(tr("Loader options"), left);
  auto* optionsLayout = new QVBoxLayout(optionsBox);
  auto* presetRow = new QHBoxLayout;
  preset_ = new QComboBox(optionsBox);
  for (const char* p : kPresets) preset_->addItem(p);
  auto* applyPreset = new QPushButton(tr("Apply preset"), optionsBox);
  connect(applyPreset, &QPushButton::clicked, this, [this] { this->applyPreset(preset_->currentText()); });
  presetRow->addWidget(preset_, 1);
  presetRow->addWidget(applyPreset);
  optionsLayout->addLayout(presetRow);
  // Two short rows (the options as JSON; the same loader as code), so the buttons fit the form.
  auto* fileRow = new QHBoxLayout;
  auto* codeRow = new QHBoxLayout;
  QHBoxLayout* row = fileRow;
  auto addButton = [&](const QString& text, const QString& tip, auto slot) {
    auto* b = new QPushButton(text, optionsBox);
    b->setToolTip(tip);
    connect(b, &QPushButton::clicked, this, slot);
    row->addWidget(b);
  };
  addButton(tr("Import…"), tr("Read LoaderOptions from a JSON file (knob names as keys)"), [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Import options"), {}, tr("JSON (*.json)"));
    if (!f.isEmpty()) importOptions(f);
  });
  addButton(tr("Export…"), tr("Write these options as JSON (stoker bench --options reads it)"), [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export options"), "loader_options.json", tr("JSON (*.json)"));
    if (!f.isEmpty()) exportOptions(f);
  });
  fileRow->addStretch(1);
  row = codeRow;
  codeRow->addWidget(new QLabel(tr("As code:"), optionsBox));
  addButton(tr("Python…"), tr("This loader in a PyTorch training script: stoker.Loader(...) (import stoker), "
                              "the same samples in the same batches, at Stoker's speed"),
            [this] { showSnippet(tr("Python (stoker)"), stokerSnippet(), Snippet::Stoker); });
  addButton(tr("PyTorch…"), tr("The equivalent torch.utils.data.DataLoader(...), for a script that cannot add a dependency"),
            [this] { showSnippet(tr("PyTorch DataLoader"), pytorchSnippet(), Snippet::PyTorch); });
  addButton(tr("C++…"), tr("The LoaderOptions builder for a C++ training program"),
            [this] { showSnippet(tr("C++ builder"), cppSnippet(), Snippet::Cpp); });
  codeRow->addStretch(1);
  optionsLayout->addLayout(fileRow);
  optionsLayout->addLayout(codeRow);
  form_ = new LoaderOptionsForm(optionsBox);
  optionsLayout->addWidget(form_);
  leftLayout->addWidget(optionsBox);
  auto* scroll = new FormScrollArea(left);
  scroll->setObjectName("loaderFormArea");
  split->addWidget(scroll);

  // Right: run controls, plots, sweep and log.
  auto* right = new QWidget;
  auto* rightLayout = new QVBoxLayout(right);
  auto* runRow = new QHBoxLayout;
  runButton_ = new QPushButton(tr("Run"), right);
  runButton_->setObjectName("run");
  runButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  runButton_->setToolTip(tr("Run the loader (Ctrl+R)"));
  stopButton_ = new QPushButton(tr("Stop"), right);
  stopButton_->setObjectName("stop");
  stopButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  stopButton_->setToolTip(tr("Stop the run or sweep at the next batch (Ctrl+.)"));
  stopButton_->setEnabled(false);
  progress_ = new QProgressBar(right);
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  badge_ = new QLabel(right);
  badge_->setObjectName("modeBadge");
  badge_->setStyleSheet("QLabel { border-radius: 8px; padding: 2px 8px; background: #3d7ebf; color: white; }");
  badge_->setToolTip(tr("Resident: the dataset lives on the device and batches are gathered there. "
                        "Streaming: workers collate on the host and copy each batch."));
  badge_->hide();
  runRow->addWidget(runButton_);
  runRow->addWidget(stopButton_);
  runRow->addWidget(progress_, 1);
  runRow->addWidget(badge_);
  rightLayout->addLayout(runRow);
  status_ = new QLabel(tr("Press Run to measure the loader with these settings."), right);
  status_->setObjectName("status");
  status_->setWordWrap(true);
  rightLayout->addWidget(status_);
  bottleneck_ = new QLabel(right);
  bottleneck_->setObjectName("bottleneck");
  bottleneck_->setWordWrap(true);
  bottleneck_->setTextFormat(Qt::PlainText);
  bottleneck_->setFrameShape(QFrame::StyledPanel);
  bottleneck_->setToolTip(tr("What limits the run now, from the share of each step spent waiting for data, and "
                             "the knob most likely to help"));
  bottleneck_->hide();
  rightLayout->addWidget(bottleneck_);
  plots_ = new TelemetryPlots(right);
  // Plots over the tabs, in a splitter: a tall sweep or tuner table never squeezes the plots
  // below readable (they keep a minimum), and users can give either side more room.
  auto* plotsAndTabs = new QSplitter(Qt::Vertical, right);
  plotsAndTabs->setChildrenCollapsible(false);
  plots_->setMinimumHeight(320);
  plotsAndTabs->addWidget(plots_);
  rightLayout->addWidget(plotsAndTabs, 1);

  auto* tabs = tabs_ = new QTabWidget(right);
  buildTuningTabs(tabs);  // Sweep and Auto-tune (loader_workspace_tuning.cpp)
  log_ = new QPlainTextEdit(right);
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  tabs->addTab(log_, tr("Log"));
  stages_ = new StageBreakdownView(tabs);
  stages_->setObjectName("stages");
  tabs->insertTab(0, stages_, tr("Stages"));
  tabs->setCurrentIndex(0);
  plotsAndTabs->addWidget(tabs);
  plotsAndTabs->setStretchFactor(0, 3);
  plotsAndTabs->setStretchFactor(1, 2);
  split->addWidget(right);
  split->setStretchFactor(1, 1);

  connect(runButton_, &QPushButton::clicked, this, &LoaderWorkspace::run);
  connect(stopButton_, &QPushButton::clicked, this, &LoaderWorkspace::stop);
  connectTuning();  // the runner's sweep and auto-tune reports (loader_workspace_tuning.cpp)
  retuneTimer_->setSingleShot(true);
  retuneTimer_->setInterval(250);
  connect(retuneTimer_, &QTimer::timeout, this, &LoaderWorkspace::retuneRunningLoader);
  connect(form_, &LoaderOptionsForm::changed, this, [this] {
    if (liveRun_) retuneTimer_->start();
  });
  connect(runner_, &LoaderRunner::retuned, this,
          [this](const QString& device, const QString& change, double time, bool atEpochEnd) {
            // One marker per change: every device reports it.
            const auto markers = plots_->markers();
            if (markers.isEmpty() || markers.back().label != change) plots_->addMarker(time, change);
            appendLog(QString("%1: %2 (%3)").arg(device, change,
                                                             atEpochEnd ? tr("from the next epoch")
                                                                        : tr("from the next batch")));
            lastLiveChange_ = tr("applied: %1").arg(change);
            setStatus(tr("Applied: %1").arg(change));
          });
  connect(form_, &LoaderOptionsForm::validityChanged, this, [this](bool valid, const QString&) {
    runButton_->setEnabled(valid && !runner_->busy());
    sweepButton_->setEnabled(valid && !runner_->busy());
    tuneButton_->setEnabled(valid && !runner_->busy());
  });

  connect(runner_, &LoaderRunner::started, this, [this](const QStringList& notes, int networkWorkers) {
    for (const auto& n : notes) appendLog(n);
    runNetworkWorkers_ = networkWorkers;
  });
  connect(runner_, &LoaderRunner::opening, this, [this](qint64 done, qint64 total, const QString& unit) {
    ProgressUpdate u;
    u.done = static_cast<std::uint64_t>(done);
    u.total = static_cast<std::uint64_t>(total);
    u.unit = unit.toStdString();
    setStatus(tr("Opening: %1… Stop ends it.").arg(QString::fromStdString(describeOpenProgress(u))));
  });
  connect(runner_, &LoaderRunner::note, this, [this](const QString& text) { appendLog(text); });
  connect(runner_, &LoaderRunner::progress, this, [this](qint64 done, qint64 total, double rate, double eta) {
    if (total > 0) progress_->setValue(static_cast<int>(1000.0 * static_cast<double>(done) / static_cast<double>(total)));
    if (rate > 0 && total > 0)
      setStatus(tr("Running: %1/s, about %2 left")
                           .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rate))), etaText(eta)));
    else if (rate > 0 && liveRun_)  // until Stop: the rate, and the last live change so it stays readable
      setStatus(tr("Running until Stop: %1/s%2")
                           .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rate))),
                                lastLiveChange_.isEmpty() ? QString() : " — " + lastLiveChange_));
  });
  connect(runner_, &LoaderRunner::finished, this, [this](const QString& summary, double samplesPerS) {
    drainTelemetry();
    setRunning(false);
    progress_->setValue(1000);
    if (openEnded_) {  // an until-Stop run has no 100 %: say it stopped
      progress_->setValue(0);
      progress_->setFormat(tr("stopped"));
    }
    setStatus(summary.section('\n', -1));
    appendLog(summary);
    Q_EMIT runFinished(samplesPerS);
  });
  connect(runner_, &LoaderRunner::failed, this, [this](const QString& message) {
    setRunning(false);
    setStatus(tr("Failed: %1").arg(message));
    appendLog("error: " + message);
    Q_EMIT runFailed(message);
  });
  connect(runner_, &LoaderRunner::stopped, this, [this] {
    setRunning(false);
    progress_->setFormat(tr("stopped"));
    setStatus(tr("Stopped."));
    appendLog("stopped");
    Q_EMIT runStopped();
  });
  drainTimer_->setInterval(40);  // 25 Hz: the plots' redraw rate
  connect(drainTimer_, &QTimer::timeout, this, &LoaderWorkspace::drainTelemetry);
  restoreSettings();
}

LoaderWorkspace::~LoaderWorkspace() {
  // Join the job's thread before the children go, so nothing reports into a half-destroyed
  // workspace (and no emission is still running while its connections are dropped).
  runner_->stopAndWait();
  runner_->disconnect(this);
  saveSettings();
  background_settings::flush();  // in the file before the application ends
}

void LoaderWorkspace::setDataset(const QString& spec) { dataset_->setSpec(spec); }

// Image datasets need transforms that fix the output size: offer torchvision's train pipeline
// when none is set (the form shows it, and the user edits it there).
void LoaderWorkspace::setImageDataset(const QString& spec) {
  setDataset(spec);
  LoaderOptions o = form_->options();
  if (o.transforms.empty()) {
    o.transforms = "RandomResizedCrop(224),RandomHorizontalFlip(0.5),Normalize(imagenet)";
    form_->setOptions(o);
  }
}
QString LoaderWorkspace::dataset() const { return dataset_->spec(); }
void LoaderWorkspace::setDevices(const QString& devices) { devices_->setText(devices); }
void LoaderWorkspace::setEpochs(int epochs) { epochs_->setValue(epochs); }
void LoaderWorkspace::setStepMicros(double micros) { stepMicros_->setValue(micros); }
QString LoaderWorkspace::badgeText() const { return badge_->text(); }
QString LoaderWorkspace::bottleneckText() const { return bottleneck_->text(); }
QString LoaderWorkspace::statusText() const { return status_->text(); }

void LoaderWorkspace::setStatus(const QString& text) { status_->setText(QString::fromStdString(redactedUrl(text.toStdString()))); }
void LoaderWorkspace::appendLog(const QString& text) { log_->appendPlainText(QString::fromStdString(redactedUrl(text.toStdString()))); }

bool LoaderWorkspace::makeRequest(LoaderRunRequest& request) {
  if (!form_->isValid()) {
    setStatus(tr("Fix the options first: %1").arg(form_->validationMessage()));
    return false;
  }
  if (dataset().isEmpty()) {
    setStatus(tr("Choose a dataset first."));
    return false;
  }
  request.dataset = dataset();
  request.options = form_->options();
  dataset_->remember(request.dataset);  // offered under "Recent" from now on
  request.devices = devices_->text().trimmed();
  request.epochs = epochs_->value();
  request.stepMicros = stepMicros_->value();
  request.measure = measure_;
  return true;
}

// The plots, badge and bottleneck panel start empty for each run, sweep or auto-tune.
void LoaderWorkspace::clearLiveViews() {
  plots_->clear();
  stages_->clear();
  badge_->clear();
  badge_->hide();
  deviceModes_.clear();
  runner_->takeTelemetry();
  bottleneck_->clear();
  bottleneck_->hide();
}

void LoaderWorkspace::run() {
  LoaderRunRequest request;
  if (runner_->busy() || !makeRequest(request)) return;
  clearLiveViews();
  if (!runner_->start(request)) return;
  setRunning(true);
  liveRun_ = true;
  lastLiveChange_.clear();
  runOptions_ = request.options;
  runNetworkWorkers_ = 0;  // until the run has opened its dataset (started)
  openEnded_ = request.epochs == 0;
  if (openEnded_) progress_->setRange(0, 0);  // until Stop: busy, no end to show
  setStatus(request.epochs == 0 ? tr("Opening %1 on %2… Runs until Stop; changes in the form apply live.")
                                             .arg(request.dataset, request.devices)
                                       : tr("Opening %1 on %2…").arg(request.dataset, request.devices));
  appendLog(QString("run: %1 on %2, %3")
                            .arg(request.dataset, request.devices,
                                 request.epochs == 0 ? QString("until Stop") : QString("%1 epochs").arg(request.epochs)));
  saveSettings();
  Q_EMIT runStarted();
}

void LoaderWorkspace::stop() { runner_->stop(); }

void LoaderWorkspace::applyPreset(const QString& name) {
  try {
    form_->setOptions(presetByName(name.toStdString()));
    setStatus(tr("Preset %1 applied.").arg(name));
  } catch (const Error& e) {
    setStatus(QString::fromStdString(e.what()));
  }
}

void LoaderWorkspace::retuneRunningLoader() {
  if (!liveRun_ || !form_->isValid()) return;
  const LoaderOptions next = form_->options();
  const QString change = QString::fromStdString(describeChange(runOptions_, next));
  if (change.isEmpty()) return;
  QString error;
  if (runner_->retune(next, &error)) {
    runOptions_ = next;
    setStatus(tr("Applying %1 at the next safe point…").arg(change));
  } else {
    lastLiveChange_ = tr("cannot apply: %1").arg(error);
    setStatus(tr("Cannot apply while running: %1").arg(error));
    appendLog("cannot apply: " + error);
  }
}

void LoaderWorkspace::setRunning(bool running) {
  if (!running) {
    liveRun_ = false;
    retuneTimer_->stop();
    progress_->setRange(0, 1000);
  }
  updateApplyState();  // nothing to apply while something runs
  runButton_->setEnabled(!running && form_->isValid());
  sweepButton_->setEnabled(!running && form_->isValid());
  tuneButton_->setEnabled(!running && form_->isValid());
  stopButton_->setEnabled(running);
  if (running) {
    progress_->setFormat("%p%");
    progress_->setValue(0);
    drainTimer_->start();
  } else {
    drainTimer_->stop();
  }
}

void LoaderWorkspace::drainTelemetry() {
  const auto records = runner_->takeTelemetry();
  if (records.empty()) return;
  plots_->addRecords(records);
  stages_->addRecords(records);
  // The badge: the latest mode of every device, e.g. "sim:0 resident".
  for (const auto& r : records) deviceModes_[QString::fromStdString(r.device)] = QString::fromStdString(r.mode);
  QStringList parts;
  for (auto it = deviceModes_.cbegin(); it != deviceModes_.cend(); ++it) parts << it.key() + " " + it.value();
  badge_->setText(parts.join(" · "));
  badge_->show();
  // The panel speaks for the device that waits most for data.
  const TelemetryRecord* worst = nullptr;
  for (const auto& r : records)
    if (!worst || dataWaitShare(r.data_wait_ms, r.step_ms) > dataWaitShare(worst->data_wait_ms, worst->step_ms)) worst = &r;
  if (!liveRun_) return;  // a sweep or the tuner: the panel would speak of whichever setting is measured now
  const Bottleneck b =
      diagnoseBottleneck(*worst, runOptions_, static_cast<int>(std::thread::hardware_concurrency()), runNetworkWorkers_);
  if (b.kind != InputBound::Unknown) {
    const QString text = QString::fromStdString(b.headline) +
                         (b.advice.empty() ? QString() : "\n" + QString::fromStdString(b.advice));
    bottleneck_->setText(text);
    bottleneck_->show();
  }
}

// Written off the GUI thread (background_settings): a run's start saves them, and Qt's sync of
// the file waited for the disk there.
void LoaderWorkspace::saveSettings() const {
  QList<QPair<QString, QVariant>> s;
  try {
    s.append({"loader/options", QString::fromStdString(loaderOptionsToJson(form_->options()))});
  } catch (const Error&) {
    // invalid options are not saved; the last valid ones stay
  }
  if (!holdsSecret(dataset().toStdString())) s.append({"loader/dataset", dataset()});  // no URL password in the settings
  s.append({"loader/devices", devices_->text()});
  s.append({"loader/epochs", epochs_->value()});
  s.append({"loader/stepMicros", stepMicros_->value()});
  for (int i = 0; i < 2; ++i) {
    s.append({QString("loader/sweepKnob%1").arg(i), sweepKnob_[i]->currentText()});
    s.append({QString("loader/sweepValues%1").arg(i), sweepValues_[i]->text()});
  }
  background_settings::set(s);
}

void LoaderWorkspace::restoreSettings() {
  QSettings s;
  s.beginGroup("loader");
  if (s.contains("options")) {
    try {
      form_->setOptions(loaderOptionsFromJson(s.value("options").toString().toStdString(), "settings"));
    } catch (const Error&) {
      form_->setOptions(gpuOptimized());  // settings from another version: start fresh
    }
  } else {
    form_->setOptions(gpuOptimized());
  }
  setDataset(s.value("dataset", "fashion-mnist").toString());
  devices_->setText(s.value("devices", "cpu").toString());
  epochs_->setValue(s.value("epochs", 0).toInt());
  stepMicros_->setValue(s.value("stepMicros", 0).toDouble());
  for (int i = 0; i < 2; ++i) {
    if (s.contains(QString("sweepKnob%1").arg(i))) sweepKnob_[i]->setCurrentText(s.value(QString("sweepKnob%1").arg(i)).toString());
    if (s.contains(QString("sweepValues%1").arg(i))) sweepValues_[i]->setText(s.value(QString("sweepValues%1").arg(i)).toString());
  }
  s.endGroup();
}

}  // namespace stoker
