// loader_workspace_tuning: the Loader workspace's Sweep and Auto-tune tabs -- their widgets,
// the runner's reports drawn into their tables and onto the plots, and Apply / Apply best, which
// are offered only for the dataset and devices they measured.
#include "loader_workspace.h"

#include <QComboBox>
#include <QDateTime>
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
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include "loader_options_form.h"
#include "loader_runner.h"
#include "telemetry_plots.h"
#include "util/error.h"

namespace stoker {

void LoaderWorkspace::buildTuningTabs(QTabWidget* tabs) {
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
}

void LoaderWorkspace::connectTuning() {
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
            setStatus(tr("Auto-tune: %1 settings measured in %2 s").arg(row + 1).arg(seconds, 0, 'f', 0));
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
            setStatus(change.isEmpty()
                                 ? tr("Auto-tune done: the settings you started with measured fastest; nothing to apply.")
                                 : tr("Auto-tune done. Apply copies the best setting into the form."));
            appendLog("auto-tune: " + text);
            updateApplyState();
            Q_EMIT tuneFinished(!change.isEmpty());
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
            setStatus(tr("Sweep: %1 of %2 done").arg(index + 1).arg(count));
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
      setStatus(similar.isEmpty()
                           ? tr("Sweep done: row %1 is fastest (%2 samples/s). Apply best copies it into the form.")
                                 .arg(best + 1)
                                 .arg(sweepTable_->item(best, sweepAxisNames_.size())->text())
                           : tr("Sweep done: row %1 measured fastest (%2 samples/s), but %3 other row(s) show no clear "
                                "difference. Apply best copies it into the form.")
                                 .arg(best + 1)
                                 .arg(sweepTable_->item(best, sweepAxisNames_.size())->text())
                                 .arg(similar.size()));
    } else {
      setStatus(tr("Sweep done: every combination failed (see the error column)."));
    }
    sweepTable_->resizeColumnsToContents();  // every column readable, the error column last and stretched
    updateApplyState();
    Q_EMIT sweepFinished(best);
  });
}

void LoaderWorkspace::setSweep(const QString& knob1, const QString& values1, const QString& knob2, const QString& values2) {
  sweepKnob_[0]->setCurrentText(knob1);
  sweepValues_[0]->setText(values1);
  sweepKnob_[1]->setCurrentText(knob2);
  sweepValues_[1]->setText(values2);
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
    setStatus(tr("Choose at least one knob to sweep."));
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
  setStatus(tr("Sweeping %1…").arg(sweepAxisNames_.join(" × ")));
  saveSettings();
  Q_EMIT runStarted();
}

void LoaderWorkspace::applyBestSweepRow() {
  if (!canApplyBestSweepRow()) return;
  try {
    // Overwrite the swept knobs with the best row's values (kept as JSON in
    // the cells' data), through JSON so any knob type works.
    const LoaderOptions current = form_->options();
    QJsonObject o = QJsonDocument::fromJson(QByteArray::fromStdString(loaderOptionsToJson(current))).object();
    for (int c = 0; c < sweepAxisNames_.size(); ++c) {
      const QByteArray value = sweepTable_->item(bestRow_, c)->data(Qt::UserRole).toString().toUtf8();
      o.insert(sweepAxisNames_[c], QJsonDocument::fromJson("[" + value + "]").array().at(0));
    }
    // QJsonValue holds no uint64: seeds not swept keep the form's exact values (one at or above
    // 2^63 came back as a double the core refused, or rounded to another seed).
    const bool seedSwept = sweepAxisNames_.contains("seed"), generatorSeedSwept = sweepAxisNames_.contains("generator_seed");
    if (!seedSwept) o.insert("seed", 0);
    if (!generatorSeedSwept) o.insert("generator_seed", 0);
    LoaderOptions best = loaderOptionsFromJson(QJsonDocument(o).toJson().toStdString(), "sweep");
    if (!seedSwept) best.seed = current.seed;
    if (!generatorSeedSwept) best.generator_seed = current.generator_seed;
    form_->setOptions(best);
    setStatus(tr("Applied sweep row %1 to the form.").arg(bestRow_ + 1));
  } catch (const Error& e) {
    setStatus(tr("Cannot apply: %1").arg(QString::fromStdString(e.what())));
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
  setStatus(tr("Auto-tuning %1 on %2…").arg(request.dataset, request.devices));
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
    setStatus(tr("Applied the auto-tuner's best setting to the form."));
  } catch (const Error& e) {
    setStatus(tr("Cannot apply: %1").arg(QString::fromStdString(e.what())));
  }
}

void LoaderWorkspace::setTuneBudget(int seconds) { tuneBudget_->setValue(seconds); }
QString LoaderWorkspace::tuneSummary() const { return tuneSummary_->text(); }

}  // namespace stoker
