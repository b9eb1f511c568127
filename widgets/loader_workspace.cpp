#include "loader_workspace.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <thread>

#include "dataset_picker.h"
#include "form_scroll_area.h"
#include "loader_options_form.h"
#include "loader_runner.h"
#include "data/dataset.h"
#include "data/pytorch_script.h"
#include "stage_breakdown_view.h"
#include "telemetry_plots.h"
#include "eta_text.h"
#include "data/bottleneck.h"
#include "util/byte_size.h"
#include "util/error.h"

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
  connect(dataset_, &QComboBox::editTextChanged, this, [this] { updateApplyState(); });
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
  auto* sweepPage = new QWidget;
  auto* sweepLayout = new QVBoxLayout(sweepPage);
  // One row per axis, the buttons after them: one long row made the whole window wider than
  // 1280 px.
  auto* axesRow = new QHBoxLayout;
  QStringList knobs{""};
  for (const auto& k : knobTable())
    if (!k.exportOnly && k.name != "weights") knobs << QString::fromStdString(k.name);
  const char* defaults[2][2] = {{"num_workers", "0,1,2"}, {"prefetch", "2,8"}};
  for (int i = 0; i < 2; ++i) {
    sweepKnob_[i] = new QComboBox(sweepPage);
    sweepKnob_[i]->addItems(knobs);
    sweepKnob_[i]->setCurrentText(defaults[i][0]);
    sweepKnob_[i]->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    sweepKnob_[i]->setMinimumContentsLength(14);
    sweepValues_[i] = new QLineEdit(defaults[i][1], sweepPage);
    sweepValues_[i]->setMinimumWidth(80);
    sweepValues_[i]->setToolTip(tr("Comma-separated values to try"));
    axesRow->addWidget(new QLabel(i == 0 ? tr("Sweep") : tr("by"), sweepPage));
    axesRow->addWidget(sweepKnob_[i]);
    axesRow->addWidget(sweepValues_[i], 2);
  }
  sweepButton_ = new QPushButton(tr("Run sweep"), sweepPage);
  sweepButton_->setObjectName("runSweep");
  sweepButton_->setToolTip(tr("Measure each combination after a warm-up until its 95 % interval is within ± 3 % (or "
                              "5 s), and rank them; overlapping intervals are marked \"no clear difference\""));
  applyButton_ = new QPushButton(tr("Apply best"), sweepPage);
  applyButton_->setObjectName("applyBest");
  applyButton_->setEnabled(false);
  auto* sweepButtons = new QHBoxLayout;
  sweepButtons->addWidget(sweepButton_);
  sweepButtons->addWidget(applyButton_);
  sweepButtons->addStretch(1);
  sweepLayout->addLayout(axesRow);
  sweepLayout->addLayout(sweepButtons);
  sweepTable_ = new QTableWidget(sweepPage);
  sweepTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  sweepTable_->setSelectionBehavior(QAbstractItemView::SelectRows);
  sweepTable_->horizontalHeader()->setStretchLastSection(true);
  sweepLayout->addWidget(sweepTable_);
  tabs->addTab(sweepPage, tr("Sweep"));

  auto* tunePage = new QWidget;
  auto* tuneLayout = new QVBoxLayout(tunePage);
  auto* tuneRow = new QHBoxLayout;
  tuneBudget_ = new QSpinBox(tunePage);
  tuneBudget_->setObjectName("tuneBudget");
  tuneBudget_->setRange(5, 3600);
  tuneBudget_->setValue(60);
  tuneBudget_->setSuffix(tr(" s"));
  tuneBudget_->setToolTip(tr("Time the auto-tuner may spend searching"));
  tuneButton_ = new QPushButton(tr("Auto-tune"), tunePage);
  tuneButton_->setObjectName("autoTune");
  tuneButton_->setToolTip(tr("Search num_workers, prefetch, batch_size, pin_memory and reuse_buffers one knob at a time "
                             "(coordinate descent), moving only to clearly faster settings, within the budget"));
  applyTunedButton_ = new QPushButton(tr("Apply"), tunePage);
  applyTunedButton_->setObjectName("applyTuned");
  applyTunedButton_->setEnabled(false);
  tuneRow->addWidget(new QLabel(tr("Budget"), tunePage));
  tuneRow->addWidget(tuneBudget_);
  tuneRow->addWidget(tuneButton_);
  tuneRow->addWidget(applyTunedButton_);
  tuneRow->addStretch(1);
  tuneLayout->addLayout(tuneRow);
  tuneSummary_ = new QLabel(tunePage);
  tuneSummary_->setObjectName("tuneSummary");
  tuneSummary_->setWordWrap(true);
  tuneLayout->addWidget(tuneSummary_);
  tuneTable_ = new QTableWidget(0, 4, tunePage);
  tuneTable_->setHorizontalHeaderLabels({tr("seconds"), tr("samples/s"), tr("± 95 %"), tr("change from the start")});
  tuneTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  tuneTable_->horizontalHeader()->setStretchLastSection(true);
  tuneLayout->addWidget(tuneTable_);
  tunePage_ = tunePage;
  sweepPage_ = sweepPage;
  tabs->addTab(tunePage, tr("Auto-tune"));
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
  connect(sweepButton_, &QPushButton::clicked, this, &LoaderWorkspace::runSweep);
  connect(applyButton_, &QPushButton::clicked, this, &LoaderWorkspace::applyBestSweepRow);
  connect(tuneButton_, &QPushButton::clicked, this, &LoaderWorkspace::runAutoTune);
  connect(applyTunedButton_, &QPushButton::clicked, this, &LoaderWorkspace::applyTuned);
  connect(runner_, &LoaderRunner::tuneTrial, this,
          [this](const QString& change, double sps, double ci, const QString& error, double seconds) {
            const int row = tuneTable_->rowCount();
            tuneTable_->insertRow(row);
            tuneTable_->setItem(row, 0, new QTableWidgetItem(QString::number(seconds, 'f', 1)));
            tuneTable_->setItem(row, 1, new QTableWidgetItem(error.isEmpty() ? QLocale().toString(sps, 'f', 0) : error));
            tuneTable_->setItem(row, 2, new QTableWidgetItem(error.isEmpty() && sps > 0
                                                                 ? QString("± %1 %").arg(100 * ci / sps, 0, 'f', 1)
                                                                 : QString()));
            tuneTable_->setItem(row, 3, new QTableWidgetItem(change.isEmpty() ? tr("(start)") : change));
            tuneTable_->scrollToBottom();
            if (error.isEmpty())  // each measured setting on the plots, as the README says
              plots_->addTrial(QDateTime::currentMSecsSinceEpoch() / 1000.0,
                               tr("%1: %L2/s").arg(change.isEmpty() ? tr("start") : change).arg(sps, 0, 'f', 0), sps);
            status_->setText(tr("Auto-tune: %1 settings measured in %2 s").arg(row + 1).arg(seconds, 0, 'f', 0));
          });
  connect(runner_, &LoaderRunner::tuneFinished, this,
          [this](const QString& change, const QString& json, double sps, double ci, double start, const QString& confidence) {
            setRunning(false);
            progress_->setValue(1000);
            tunedJson_ = change.isEmpty() ? QString() : json;
            // Grouped digits, and "%" kept beside its number when the label wraps.
            const QString sure = QString(confidence).replace(" %", QString(QChar(0x00A0)) + "%");
            const QString text = change.isEmpty()
                                     ? tr("Best: the starting options, %L1 samples/s ± %L2. %3")
                                           .arg(sps, 0, 'f', 0).arg(ci, 0, 'f', 0).arg(sure)
                                     : tr("Best: %1 — %L2 samples/s ± %L3 (start: %L4). %5")
                                           .arg(change).arg(sps, 0, 'f', 0).arg(ci, 0, 'f', 0).arg(start, 0, 'f', 0)
                                           .arg(sure);
            tuneSummary_->setText(text);
            status_->setText(change.isEmpty()
                                 ? tr("Auto-tune done: the settings you started with measured fastest; nothing to apply.")
                                 : tr("Auto-tune done. Apply copies the best setting into the form."));
            log_->appendPlainText("auto-tune: " + text);
            updateApplyState();
            Q_EMIT tuneFinished(!change.isEmpty());
          });
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
            log_->appendPlainText(QString("%1: %2 (%3)").arg(device, change,
                                                             atEpochEnd ? tr("from the next epoch")
                                                                        : tr("from the next batch")));
            lastLiveChange_ = tr("applied: %1").arg(change);
            status_->setText(tr("Applied: %1").arg(change));
          });
  connect(form_, &LoaderOptionsForm::validityChanged, this, [this](bool valid, const QString&) {
    runButton_->setEnabled(valid && !runner_->busy());
    sweepButton_->setEnabled(valid && !runner_->busy());
    tuneButton_->setEnabled(valid && !runner_->busy());
  });

  connect(runner_, &LoaderRunner::started, this, [this](const QStringList& notes) {
    for (const auto& n : notes) log_->appendPlainText(n);
  });
  connect(runner_, &LoaderRunner::note, this, [this](const QString& text) { log_->appendPlainText(text); });
  connect(runner_, &LoaderRunner::progress, this, [this](qint64 done, qint64 total, double rate, double eta) {
    if (total > 0) progress_->setValue(static_cast<int>(1000.0 * static_cast<double>(done) / static_cast<double>(total)));
    if (rate > 0 && total > 0)
      status_->setText(tr("Running: %1/s, about %2 left")
                           .arg(QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rate))), etaText(eta)));
    else if (rate > 0 && liveRun_)  // until Stop: the rate, and the last live change so it stays readable
      status_->setText(tr("Running until Stop: %1/s%2")
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
    status_->setText(summary.section('\n', -1));
    log_->appendPlainText(summary);
    Q_EMIT runFinished(samplesPerS);
  });
  connect(runner_, &LoaderRunner::failed, this, [this](const QString& message) {
    setRunning(false);
    status_->setText(tr("Failed: %1").arg(message));
    log_->appendPlainText("error: " + message);
    Q_EMIT runFailed(message);
  });
  connect(runner_, &LoaderRunner::stopped, this, [this] {
    setRunning(false);
    progress_->setFormat(tr("stopped"));
    status_->setText(tr("Stopped."));
    log_->appendPlainText("stopped");
    Q_EMIT runStopped();
  });
  connect(runner_, &LoaderRunner::sweepPoint, this,
          [this](int index, int count, const QStringList& values, double sps, double bps, const QString& mode,
                 const QString& error) {
            sweepTable_->setRowCount(count);
            // values..., samples/s, ± 95 % (sweepPointSpread), verdict (when the sweep ends),
            // p10-p90 (sweepPointSpread), MB/s, mode, error: the columns that decide come first
            const QStringList cells = values + QStringList{error.isEmpty() ? QLocale().toString(sps, 'f', 0) : QString(),
                                                           QString(), QString(), QString(),
                                                           error.isEmpty() ? QString::number(bps / 1e6, 'f', 1) : QString(),
                                                           mode, error};
            for (int c = 0; c < cells.size(); ++c) {
              QString text = cells[c];
              if (c < values.size() && text.startsWith('"')) text = text.mid(1, text.size() - 2);  // a name
              auto* item = new QTableWidgetItem(text);
              if (c < values.size()) item->setData(Qt::UserRole, cells[c]);  // the JSON value, for Apply best
              if (c == values.size() && error.isEmpty()) item->setData(Qt::UserRole, sps);  // the rate, as a number
              sweepTable_->setItem(index, c, item);
            }
            status_->setText(tr("Sweep: %1 of %2 done").arg(index + 1).arg(count));
            if (error.isEmpty()) {  // each measured point on the plots
              QStringList setting;
              for (int a = 0; a < values.size() && a < sweepAxisNames_.size(); ++a)
                setting << sweepAxisNames_[a] + " " + QString(values[a]).remove('"');
              plots_->addTrial(QDateTime::currentMSecsSinceEpoch() / 1000.0,
                               tr("%1: %L2/s").arg(setting.join(", ")).arg(sps, 0, 'f', 0), sps);
            }
          });
  connect(runner_, &LoaderRunner::sweepPointSpread, this, [this](int index, double ci, double p10, double p90) {
    const int c = static_cast<int>(sweepAxisNames_.size()) + 1;
    const QTableWidgetItem* rate = sweepTable_->item(index, c - 1);
    if (!rate || rate->text().isEmpty()) return;  // the point failed
    const double mean = rate->data(Qt::UserRole).toDouble();
    sweepTable_->setItem(index, c, new QTableWidgetItem(mean > 0 ? QString("± %1 %").arg(100 * ci / mean, 0, 'f', 1) : QString()));
    sweepTable_->setItem(index, c + 2, new QTableWidgetItem(QString("%L1–%L2").arg(p10, 0, 'f', 0).arg(p90, 0, 'f', 0)));
  });
  connect(runner_, &LoaderRunner::sweepFinished, this, [this](int best, const QList<int>& similar) {
    setRunning(false);
    bestRow_ = best;
    similarRows_ = similar;
    const int verdict = static_cast<int>(sweepAxisNames_.size()) + 2;
    if (best >= 0) sweepTable_->setItem(best, verdict, new QTableWidgetItem(tr("fastest")));
    for (int row : similar) {
      auto* item = new QTableWidgetItem(tr("no clear difference"));
      item->setToolTip(tr("Its 95 % interval overlaps the fastest's: the two cannot be told apart"));
      sweepTable_->setItem(row, verdict, item);
    }
    if (best >= 0) {
      const QColor highlight = palette().color(QPalette::Highlight);
      for (int c = 0; c < sweepTable_->columnCount(); ++c)
        if (auto* item = sweepTable_->item(best, c)) {
          item->setBackground(highlight);
          item->setForeground(palette().color(QPalette::HighlightedText));
          QFont f = item->font();
          f.setBold(true);
          item->setFont(f);
        }
      status_->setText(similar.isEmpty()
                           ? tr("Sweep done: row %1 is fastest (%2 samples/s). Apply best copies it into the form.")
                                 .arg(best + 1)
                                 .arg(sweepTable_->item(best, sweepAxisNames_.size())->text())
                           : tr("Sweep done: row %1 measured fastest (%2 samples/s), but %3 other row(s) show no clear "
                                "difference. Apply best copies it into the form.")
                                 .arg(best + 1)
                                 .arg(sweepTable_->item(best, sweepAxisNames_.size())->text())
                                 .arg(similar.size()));
    } else {
      status_->setText(tr("Sweep done: every combination failed (see the error column)."));
    }
    sweepTable_->resizeColumnsToContents();  // every column readable, the error column last and stretched
    updateApplyState();
    Q_EMIT sweepFinished(best);
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

void LoaderWorkspace::setSweep(const QString& knob1, const QString& values1, const QString& knob2, const QString& values2) {
  sweepKnob_[0]->setCurrentText(knob1);
  sweepValues_[0]->setText(values1);
  sweepKnob_[1]->setCurrentText(knob2);
  sweepValues_[1]->setText(values2);
}

bool LoaderWorkspace::makeRequest(LoaderRunRequest& request) {
  if (!form_->isValid()) {
    status_->setText(tr("Fix the options first: %1").arg(form_->validationMessage()));
    return false;
  }
  if (dataset().isEmpty()) {
    status_->setText(tr("Choose a dataset first."));
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
  openEnded_ = request.epochs == 0;
  if (openEnded_) progress_->setRange(0, 0);  // until Stop: busy, no end to show
  status_->setText(request.epochs == 0 ? tr("Opening %1 on %2… Runs until Stop; changes in the form apply live.")
                                             .arg(request.dataset, request.devices)
                                       : tr("Opening %1 on %2…").arg(request.dataset, request.devices));
  log_->appendPlainText(QString("run: %1 on %2, %3")
                            .arg(request.dataset, request.devices,
                                 request.epochs == 0 ? QString("until Stop") : QString("%1 epochs").arg(request.epochs)));
  saveSettings();
  Q_EMIT runStarted();
}

void LoaderWorkspace::runSweep() {
  LoaderRunRequest request;
  if (runner_->busy() || !makeRequest(request)) return;
  QList<SweepAxisText> axes;
  sweepAxisNames_.clear();
  for (int i = 0; i < 2; ++i)
    if (!sweepKnob_[i]->currentText().isEmpty()) {
      axes.push_back({sweepKnob_[i]->currentText(), sweepValues_[i]->text()});
      sweepAxisNames_ << sweepKnob_[i]->currentText();
    }
  if (axes.isEmpty()) {
    status_->setText(tr("Choose at least one knob to sweep."));
    return;
  }
  bestRow_ = -1;
  sweptFor_ = target();
  applyButton_->setEnabled(false);
  sweepTable_->clear();
  sweepTable_->setRowCount(0);
  sweepTable_->setColumnCount(sweepAxisNames_.size() + 7);
  sweepTable_->setHorizontalHeaderLabels(sweepAxisNames_ + QStringList{tr("samples/s"), tr("± 95 %"), tr("verdict"),
                                                                       tr("p10–p90"), tr("MB/s"), tr("mode"), tr("error")});
  clearLiveViews();  // the plots show each point as it is measured
  if (!runner_->startSweep(request, axes)) return;
  setRunning(true);
  tabs_->setCurrentWidget(sweepPage_);
  status_->setText(tr("Sweeping %1…").arg(sweepAxisNames_.join(" × ")));
  saveSettings();
  Q_EMIT runStarted();
}

void LoaderWorkspace::applyBestSweepRow() {
  if (!canApplyBestSweepRow()) return;
  try {
    // Overwrite the swept knobs with the best row's values (kept as JSON in
    // the cells' data), through JSON so any knob type works.
    QJsonObject o = QJsonDocument::fromJson(QByteArray::fromStdString(loaderOptionsToJson(form_->options()))).object();
    for (int c = 0; c < sweepAxisNames_.size(); ++c) {
      const QByteArray value = sweepTable_->item(bestRow_, c)->data(Qt::UserRole).toString().toUtf8();
      o.insert(sweepAxisNames_[c], QJsonDocument::fromJson("[" + value + "]").array().at(0));
    }
    form_->setOptions(loaderOptionsFromJson(QJsonDocument(o).toJson().toStdString(), "sweep"));
    status_->setText(tr("Applied sweep row %1 to the form.").arg(bestRow_ + 1));
  } catch (const Error& e) {
    status_->setText(tr("Cannot apply: %1").arg(QString::fromStdString(e.what())));
  }
}

void LoaderWorkspace::runAutoTune() {
  LoaderRunRequest request;
  if (runner_->busy() || !makeRequest(request)) return;
  request.tuneBudgetSeconds = tuneBudget_->value();
  tunedJson_.clear();
  tunedFor_ = target();
  applyTunedButton_->setEnabled(false);
  tuneTable_->setRowCount(0);
  tuneSummary_->setText(tr("Searching for up to %1 s…").arg(tuneBudget_->value()));
  clearLiveViews();  // the plots show each trial as it is measured
  if (!runner_->startTune(request)) return;
  setRunning(true);
  tabs_->setCurrentWidget(tunePage_);
  status_->setText(tr("Auto-tuning %1 on %2…").arg(request.dataset, request.devices));
  saveSettings();
  Q_EMIT runStarted();
}

QString LoaderWorkspace::target() const { return dataset() + " @ " + devices_->text().trimmed(); }

bool LoaderWorkspace::canApplyTuned() const {
  return !tunedJson_.isEmpty() && tunedFor_ == target() && !runner_->busy();
}

bool LoaderWorkspace::canApplyBestSweepRow() const { return bestRow_ >= 0 && sweptFor_ == target() && !runner_->busy(); }

// Results measured on another dataset or device are not offered: the button says why.
void LoaderWorkspace::updateApplyState() {
  applyTunedButton_->setEnabled(canApplyTuned());
  applyTunedButton_->setToolTip(!tunedJson_.isEmpty() && tunedFor_ != target()
                                    ? tr("The auto-tuner measured %1; run it again for %2").arg(tunedFor_, target())
                                    : tr("Copy the auto-tuner's best setting into the form"));
  applyButton_->setEnabled(canApplyBestSweepRow());
  applyButton_->setToolTip(bestRow_ >= 0 && sweptFor_ != target()
                               ? tr("The sweep measured %1; sweep again for %2").arg(sweptFor_, target())
                               : tr("Copy the fastest row's values into the form"));
}

void LoaderWorkspace::applyTuned() {
  if (!canApplyTuned()) return;
  try {
    form_->setOptions(loaderOptionsFromJson(tunedJson_.toStdString(), "auto-tune"));
    status_->setText(tr("Applied the auto-tuner's best setting to the form."));
  } catch (const Error& e) {
    status_->setText(tr("Cannot apply: %1").arg(QString::fromStdString(e.what())));
  }
}

void LoaderWorkspace::setTuneBudget(int seconds) { tuneBudget_->setValue(seconds); }
QString LoaderWorkspace::tuneSummary() const { return tuneSummary_->text(); }

void LoaderWorkspace::stop() { runner_->stop(); }

void LoaderWorkspace::applyPreset(const QString& name) {
  try {
    form_->setOptions(presetByName(name.toStdString()));
    status_->setText(tr("Preset %1 applied.").arg(name));
  } catch (const Error& e) {
    status_->setText(QString::fromStdString(e.what()));
  }
}

bool LoaderWorkspace::importOptions(const QString& path) {
  try {
    form_->setOptions(loadLoaderOptions(path.toStdString()));
    status_->setText(tr("Imported %1.").arg(path));
    return true;
  } catch (const Error& e) {
    status_->setText(tr("Cannot import: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

bool LoaderWorkspace::exportOptions(const QString& path) {
  try {
    saveLoaderOptions(path.toStdString(), form_->options());
    status_->setText(tr("Exported to %1.").arg(path));
    return true;
  } catch (const Error& e) {
    status_->setText(tr("Cannot export: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

QString LoaderWorkspace::pytorchSnippet() const {
  try {
    // A script that runs as pasted: the dataset defined, nothing pinned on cpu.
    return QString::fromStdString(exportPyTorchScript(form_->options(), dataset().toStdString(),
                                                      snippetDevice().toStdString()));
  } catch (const Error& e) {
    return QString("# the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::stokerSnippet() const {
  try {
    return QString::fromStdString(
        exportStokerSnippet(form_->options(), dataset().toStdString(), snippetDevice().toStdString()));
  } catch (const Error& e) {
    return QString("# the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::snippetDevice() const {
  const QString device = devices_->text().section(',', 0, 0).trimmed();
  return device.isEmpty() || device == "all" ? QStringLiteral("cuda:0") : device;
}

QString LoaderWorkspace::cppSnippet() const {
  try {
    return QString::fromStdString(exportCppSnippet(form_->options()));
  } catch (const Error& e) {
    return QString("// the options are invalid: %1").arg(QString::fromStdString(e.what()));
  }
}

QString LoaderWorkspace::weightsPathFor(const QString& snippetPath) const {
  const QFileInfo info(snippetPath);
  return info.dir().filePath(info.completeBaseName() + ".weights.json");
}

bool LoaderWorkspace::saveSnippet(const QString& path, Snippet kind) {
  try {
    const LoaderOptions o = form_->options();
    const std::string weights = weightsPathFor(path).toStdString();
    const std::string device = snippetDevice().toStdString();
    const std::string text = kind == Snippet::PyTorch  ? exportPyTorchScript(o, dataset().toStdString(), device, weights)
                             : kind == Snippet::Stoker ? exportStokerSnippet(o, dataset().toStdString(), device, weights)
                                                       : exportCppSnippet(o, device, weights);
    if (o.sampler_type == SamplerType::Weighted) saveWeightsFile(weights, o.weights);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(QByteArray::fromStdString(text)) < 0 ||
        !file.flush())
      throw Error(ErrorKind::Io, path.toStdString(), file.errorString().toStdString());
    status_->setText(o.sampler_type == SamplerType::Weighted
                         ? tr("Saved %1 and the weights it loads, %2.").arg(path, QString::fromStdString(weights))
                         : tr("Saved %1.").arg(path));
    return true;
  } catch (const Error& e) {
    status_->setText(tr("Cannot save the snippet: %1").arg(QString::fromStdString(e.what())));
    return false;
  }
}

void LoaderWorkspace::showSnippet(const QString& title, const QString& text, Snippet kind) {
  const bool python = kind != Snippet::Cpp;
  QDialog dialog(this);
  dialog.setWindowTitle(title);
  auto* layout = new QVBoxLayout(&dialog);
  auto* view = new QPlainTextEdit(text, &dialog);
  view->setReadOnly(true);
  view->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(view);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, &dialog);
  auto* copy = buttons->addButton(tr("Copy"), QDialogButtonBox::ActionRole);
  connect(copy, &QPushButton::clicked, &dialog, [text] { QApplication::clipboard()->setText(text); });
  auto* save = buttons->addButton(tr("Save…"), QDialogButtonBox::ActionRole);
  save->setToolTip(tr("Write the snippet to a file (a weighted sampler's weights go beside it)"));
  connect(save, &QPushButton::clicked, &dialog, [this, &dialog, kind, python] {
    const QString f = QFileDialog::getSaveFileName(&dialog, tr("Save snippet"), python ? "loader.py" : "loader.cpp",
                                                   python ? tr("Python (*.py)") : tr("C++ (*.cpp)"));
    if (!f.isEmpty() && saveSnippet(f, kind)) dialog.accept();
  });
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  layout->addWidget(buttons);
  dialog.resize(640, 420);
  dialog.exec();
}

void LoaderWorkspace::retuneRunningLoader() {
  if (!liveRun_ || !form_->isValid()) return;
  const LoaderOptions next = form_->options();
  const QString change = QString::fromStdString(describeChange(runOptions_, next));
  if (change.isEmpty()) return;
  QString error;
  if (runner_->retune(next, &error)) {
    runOptions_ = next;
    status_->setText(tr("Applying %1 at the next safe point…").arg(change));
  } else {
    lastLiveChange_ = tr("cannot apply: %1").arg(error);
    status_->setText(tr("Cannot apply while running: %1").arg(error));
    log_->appendPlainText("cannot apply: " + error);
  }
}

void LoaderWorkspace::setRunning(bool running) {
  if (!running) {
    liveRun_ = false;
    retuneTimer_->stop();
    progress_->setRange(0, 1000);
  }
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
  const Bottleneck b = diagnoseBottleneck(*worst, runOptions_, static_cast<int>(std::thread::hardware_concurrency()));
  if (b.kind != InputBound::Unknown) {
    const QString text = QString::fromStdString(b.headline) +
                         (b.advice.empty() ? QString() : "\n" + QString::fromStdString(b.advice));
    bottleneck_->setText(text);
    bottleneck_->show();
  }
}

void LoaderWorkspace::saveSettings() const {
  QSettings s;
  s.beginGroup("loader");
  try {
    s.setValue("options", QString::fromStdString(loaderOptionsToJson(form_->options())));
  } catch (const Error&) {
    // invalid options are not saved; the last valid ones stay
  }
  s.setValue("dataset", dataset());
  s.setValue("devices", devices_->text());
  s.setValue("epochs", epochs_->value());
  s.setValue("stepMicros", stepMicros_->value());
  for (int i = 0; i < 2; ++i) {
    s.setValue(QString("sweepKnob%1").arg(i), sweepKnob_[i]->currentText());
    s.setValue(QString("sweepValues%1").arg(i), sweepValues_[i]->text());
  }
  s.endGroup();
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
