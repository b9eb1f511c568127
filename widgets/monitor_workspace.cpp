#include "monitor_workspace.h"

#include "session_export.h"

#include <algorithm>

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QUuid>
#include <QVBoxLayout>
#include <cmath>

#include "background_settings.h"
#include "rank_heat_map.h"
#include "telemetry/metrics_http_server.h"
#include "telemetry/prometheus_exporter.h"
#include "telemetry/input_bound.h"
#include "telemetry/stragglers.h"
#include <QDateTime>
#include <QLocale>
#include <limits>
#include "stage_breakdown_view.h"
#include "telemetry_plots.h"
#include "telemetry_source.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {
namespace {

// The verdict first: it is what the table is for.
enum Column {
  Rank, Device, Verdict, StragglerCol, Share, SamplesPerS, Bandwidth, Wait, StepMs, Stages, Network, Epoch, Step,
  Source, Loader, Mode, Host, Pid, Columns
};
const char* kHeaders[Columns] = {"rank",    "device", "verdict", "straggler", "wait share", "samples/s",
                                 "bytes/s", "data wait ms", "step ms", "stages ms", "network", "epoch", "step",
                                 "source",  "loader", "mode",    "host",      "pid"};

constexpr int kTableRefreshMs = 250;  // the table and banner: 4 updates a second are plenty
constexpr int kShowHeatMapAbove = 8;  // series: per-rank lines stop being readable
constexpr std::size_t kMaxRows = 4096;  // rows of the table: series (rank, device, host, pid, loader)
// The session's recording stops here (256 ranks at 10 records/s write ~4 GB an hour): the status
// says so, and Save keeps what was recorded.
constexpr qint64 kMaxSessionBytes = 2LL << 30;

QColor verdictColour(InputBound b) {
  switch (b) {
    case InputBound::Fine: return QColor(46, 125, 50, 90);
    case InputBound::Moderate: return QColor(230, 160, 0, 110);
    case InputBound::InputBound: return QColor(198, 40, 40, 140);
    case InputBound::Unknown: break;
  }
  return QColor(0, 0, 0, 0);
}

// Sorts by the number in UserRole when both cells have one ("9 %" before "10 %"; "—" last), then
// by the text in UserRole + 1 (the rank column's device), else by text.
constexpr int kSecondaryRole = Qt::UserRole + 1;
class SortItem : public QTableWidgetItem {
 public:
  bool operator<(const QTableWidgetItem& other) const override {
    const QVariant a = data(Qt::UserRole), b = other.data(Qt::UserRole);
    if (a.isValid() != b.isValid()) return a.isValid();
    if (a.isValid() && a.toDouble() != b.toDouble()) return a.toDouble() < b.toDouble();
    if (!a.isValid() && text() != other.text()) return text() < other.text();
    return data(kSecondaryRole).toString() < other.data(kSecondaryRole).toString();
  }
};

const QString kDash = QStringLiteral("—");  // a figure the publisher does not know

QString stagesText(const TelemetryRecord& r) {
  if (r.stages_ms.empty()) return kDash;
  QStringList parts;
  for (const char* stage : kTelemetryStages) {
    const auto it = r.stages_ms.find(stage);
    if (it != r.stages_ms.end()) parts << QString("%1 %2").arg(stage).arg(it->second, 0, 'f', 2);
  }
  return parts.join(" · ");
}

// What the process has asked remote storage for (a remote dataset); — for local data.
QString networkText(const TelemetryRecord& r) {
  if (!isKnown(r.net_requests)) return kDash;
  QString text = QObject::tr("%1 req").arg(QLocale().toString(static_cast<qlonglong>(r.net_requests)));
  if (isKnown(r.net_bytes)) text += " · " + QString::fromStdString(humanBytes(static_cast<std::uint64_t>(r.net_bytes)));
  if (isKnown(r.net_retries) && r.net_retries > 0)  // retries are what to look for: shown when there are some
    text += " · " + QObject::tr("%1 retried").arg(QLocale().toString(static_cast<qlonglong>(r.net_retries)));
  return text;
}

// A series that sent nothing for this many of its usual intervals, and at least endedMs_ (5 s),
// has ended (the job finished or died): its row says so, greyed, instead of a green "fine".
constexpr double kEndedIntervals = 5;
constexpr int kEndedRole = Qt::UserRole + 2;  // on the rank item: the row is shown as ended

}  // namespace

SeriesKey seriesKey(const TelemetryRecord& r) { return {r.rank, r.device, r.host, r.pid, r.loader}; }

MonitorWorkspace::MonitorWorkspace(QWidget* parent)
    : QWidget(parent), source_(new TelemetrySource(this)), drainTimer_(new QTimer(this)) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* row = new QHBoxLayout;
  address_ = new QLineEdit(background_settings::value("monitor/address", ":29650").toString(), this);
  address_->setObjectName("address");
  address_->setToolTip(tr("Listen: HOST:PORT or :PORT that ranks publish to (stoker_probe --publish, "
                          "stoker feed/bench --publish, the trainer's --publish).\nConnect: HOST:PORT of a "
                          "publisher started with --publish listen:PORT"));
  prometheus_ = new QLineEdit(background_settings::value("monitor/prometheus").toString(), this);
  prometheus_->setObjectName("prometheus");
  prometheus_->setPlaceholderText(tr("off"));
  prometheus_->setMaximumWidth(140);
  prometheus_->setToolTip(tr("[HOST]:PORT to serve what arrives as Prometheus metrics on /metrics (e.g. :9464); "
                             "empty: off. Applies from the next Listen/Connect/Open"));
  listenButton_ = new QPushButton(tr("Listen"), this);
  listenButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  listenButton_->setToolTip(tr("Accept telemetry from any number of ranks (Ctrl+R)"));
  connectButton_ = new QPushButton(tr("Connect"), this);
  connectButton_->setToolTip(tr("Dial a publisher that listens (--publish listen:PORT): for jobs behind a firewall "
                                "that lets only this workstation connect out"));
  followButton_ = new QPushButton(tr("Open…"), this);
  // Not Ctrl+O: that is File > Open checkpoint everywhere, and two live shortcuts on one key made
  // Qt call it ambiguous and run neither.
  followButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  followButton_->setToolTip(tr("Replay a saved session, or follow a telemetry file a job writes with "
                               "--publish file:PATH as it grows (Ctrl+Shift+O)"));
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  stopButton_->setEnabled(false);
  saveButton_ = new QPushButton(tr("Save session…"), this);
  saveButton_->setToolTip(tr("Keep every record of this session as JSON lines (reopen it with Open…)"));
  saveButton_->setEnabled(false);
  exportButton_ = new QPushButton(tr("Export…"), this);
  exportButton_->setToolTip(tr("The plots and the heat map as PNG, every record as CSV"));
  exportButton_->setEnabled(false);
  row->addWidget(new QLabel(tr("Address"), this));
  row->addWidget(address_, 1);
  row->addWidget(new QLabel(tr("Prometheus"), this));
  row->addWidget(prometheus_);
  tuneButton_ = new QPushButton(tr("Tune in Loader"), this);
  tuneButton_->setToolTip(tr("Open the selected row's loader, with its dataset and options, in the Loader workspace "
                             "to re-tune it (for loaders that send them: stoker.Loader in a Python script)"));
  tuneButton_->setEnabled(false);
  for (auto* b : {listenButton_, connectButton_, followButton_, stopButton_, saveButton_, exportButton_, tuneButton_})
    row->addWidget(b);
  outer->addLayout(row);
  status_ = new QLabel(tr("Not listening. Press Listen, then start a job with --publish to this address."), this);
  status_->setObjectName("status");
  outer->addWidget(status_);
  // Always there, so that a straggler appearing does not shift the whole workspace (a relayout
  // of every plot is a stall with 256 ranks); its colour says whether one was found.
  banner_ = new QLabel(this);
  banner_->setObjectName("straggler_banner");
  outer->addWidget(banner_);
  showStragglers({});

  auto* split = new QSplitter(Qt::Vertical, this);
  views_ = new QTabWidget(split);
  plots_ = new TelemetryPlots(views_);
  plots_->setLabelByRank(true);
  plots_->setAggregateAbove(kShowHeatMapAbove);
  views_->addTab(plots_, tr("Plots"));
  auto* heatPage = new QWidget(views_);
  auto* heatLayout = new QVBoxLayout(heatPage);
  heatLayout->setContentsMargins(0, 0, 0, 0);
  auto* heatRow = new QHBoxLayout;
  heatFigure_ = new QComboBox(heatPage);
  heatFigure_->addItems({tr("data-wait share"), tr("samples/s")});
  heatRow->addWidget(new QLabel(tr("Colour by"), heatPage));
  heatRow->addWidget(heatFigure_);
  heatRow->addStretch(1);
  heatLayout->addLayout(heatRow);
  heatMap_ = new RankHeatMap(heatPage);
  heatLayout->addWidget(heatMap_, 1);
  views_->addTab(heatPage, tr("Heat map (ranks × time)"));
  stages_ = new StageBreakdownView(views_);
  stages_->setObjectName("stages");
  stages_->setLabelByRank(true);
  views_->addTab(stages_, tr("Stages"));
  table_ = new QTableWidget(0, Columns, split);
  table_->setObjectName("ranks");
  QStringList headers;
  for (const char* h : kHeaders) headers << tr(h);
  table_->setHorizontalHeaderLabels(headers);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setWordWrap(false);  // one line per rank: long stage lists are elided, the tooltip has them
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->horizontalHeader()->resizeSection(Network, table_->fontMetrics().horizontalAdvance("12,345,678 req · 999.9 GiB") + 12);
  table_->setSortingEnabled(true);
  table_->sortByColumn(Rank, Qt::AscendingOrder);
  table_->horizontalHeaderItem(Share)->setToolTip(tr("data wait ÷ (data wait + step): the share of each iteration "
                                                     "spent waiting for input"));
  table_->horizontalHeaderItem(Verdict)->setToolTip(tr("< 5 % fine, 5–20 % moderate, ≥ 20 % input-bound"));
  table_->horizontalHeaderItem(StragglerCol)
      ->setToolTip(tr("Data wait or step far above the other ranks' (robust z-score > 3.5)"));
  table_->horizontalHeaderItem(Stages)->setToolTip(tr("Mean worker milliseconds per batch by stage, when the "
                                                      "publisher measures them; — when it does not"));
  table_->horizontalHeaderItem(Network)->setToolTip(tr("What the process has asked remote storage (s3://, http(s)://) "
                                                       "for so far: requests, bytes received, requests retried; — for local data"));
  split->addWidget(views_);
  split->addWidget(table_);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 1);
  split->setSizes({420, 220});
  outer->addWidget(split, 1);

  connect(listenButton_, &QPushButton::clicked, this, &MonitorWorkspace::listen);
  connect(connectButton_, &QPushButton::clicked, this, &MonitorWorkspace::connectToPublisher);
  connect(followButton_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Session or telemetry file"), {},
                                                   tr("JSON lines (*.jsonl *.json *.log);;All files (*)"));
    if (!f.isEmpty()) followFile(f);
  });
  connect(stopButton_, &QPushButton::clicked, this, &MonitorWorkspace::stop);
  connect(saveButton_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Save session"), "monitor-session.jsonl",
                                                   tr("JSON lines (*.jsonl)"));
    if (f.isEmpty()) return;
    if (saveSession(f)) status_->setText(tr("Saving the session to %1…").arg(f));
    else status_->setText(tr("Error: cannot save to %1 (no session recorded, or a save is under way)").arg(f));
  });
  connect(exportButton_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export plots (PNG) and records (CSV)"), "monitor.png",
                                                   tr("PNG image (*.png)"));
    if (f.isEmpty()) return;
    if (exportSession(f)) status_->setText(tr("Exporting the records to %1…").arg(sessionExportPath_));
    else status_->setText(tr("Error: cannot export to %1 (no session recorded, the PNGs cannot be written, or an export is under way)").arg(f));
  });
  sessionExport_ = new SessionExport(this);
  connect(sessionExport_, &SessionExport::written, this, [this](const QString& path, qint64 records) {
    fileNote_ = tr("; wrote %1 records to %2").arg(records).arg(path);
    status_->setText(tr("Wrote %1 records to %2").arg(records).arg(path));
    Q_EMIT sessionWritten(path, true);
  });
  connect(sessionExport_, &BackgroundJob::failed, this, [this](const QString& message) {
    fileNote_ = tr("; could not write %1: %2").arg(sessionExportPath_, message);
    status_->setText(tr("Error: %1").arg(message));
    Q_EMIT sessionWritten(sessionExportPath_, false);
  });
  connect(sessionExport_, &BackgroundJob::stopped, this, [this] { Q_EMIT sessionWritten(sessionExportPath_, false); });
  connect(tuneButton_, &QPushButton::clicked, this, [this] {
    const int row = std::max(0, table_->currentRow());
    if (row >= table_->rowCount()) return;
    tuneLoader(table_->item(row, Rank)->data(Qt::UserRole).toInt(), table_->item(row, Device)->text());
  });
  connect(heatFigure_, &QComboBox::currentIndexChanged, this,
          [this](int i) { heatMap_->setFigure(i == 0 ? RankHeatMap::WaitShare : RankHeatMap::SamplesPerSecond); });
  connect(views_, &QTabWidget::tabBarClicked, this, [this] { viewChosen_ = true; });
  connect(source_, &TelemetrySource::listening, this, [this](int port) {
    port_ = port;
    sourceText_ = tr("Listening on port %1").arg(port);
    status_->setText(sourceText_ + tr(": no records yet") + metricsNote_ + ".");
    Q_EMIT listening(port);
  });
  connect(source_, &TelemetrySource::dialling, this, [this](const QString& address) {
    sourceText_ = tr("Connecting to %1").arg(address);
    status_->setText(sourceText_ + tr(": no records yet (dialled again every second)."));
  });
  connect(source_, &TelemetrySource::following, this, [this](const QString& path) {
    sourceText_ = tr("Reading %1").arg(path);
    status_->setText(sourceText_);
  });
  auto ended = [this] {
    drain();
    drainTimer_->stop();
    for (auto* b : {listenButton_, connectButton_, followButton_}) b->setEnabled(true);
    stopButton_->setEnabled(false);
  };
  connect(source_, &BackgroundJob::failed, this, [this, ended](const QString& message) {
    ended();
    status_->setText(tr("Error: %1").arg(message));
    Q_EMIT failed(message);
  });
  connect(source_, &BackgroundJob::stopped, this, [this, ended] {
    ended();
    status_->setText(tr("Stopped. %1 records received.").arg(records_));
  });
  drainTimer_->setInterval(40);  // 25 Hz, the plots' rate
  connect(drainTimer_, &QTimer::timeout, this, &MonitorWorkspace::drain);
  auto* tableTimer = new QTimer(this);
  tableTimer->setInterval(kTableRefreshMs);
  connect(tableTimer, &QTimer::timeout, this, [this] {
    bool newlyEnded = false;
    for (const auto& [key, item] : rows_)  // a series that went quiet is shown as ended
      if (item->data(kEndedRole).toBool() != this->ended(key)) {
        tableDirty_ = true;
        newlyEnded |= this->ended(key);
      }
    if (!tableDirty_) return;  // nothing arrived or ended since the last refresh
    tableDirty_ = false;
    table_->setSortingEnabled(false);  // rows stay put while they change, then sort once
    // New series' rows are added at once: a row at a time, 256 ranks' first refresh held the
    // event loop 32 ms (each insertion re-lays the header and the scroll bars).
    int fresh = 0;
    for (const auto& [key, rec] : latest_) fresh += rows_.count(key) == 0 ? 1 : 0;
    nextNewRow_ = table_->rowCount();
    if (fresh > 0) table_->setRowCount(nextNewRow_ + fresh);
    {
      // One repaint for the whole refresh, not a dataChanged (and a view update) per changed
      // cell: 256 ranks change ~2,000 cells a refresh, which took 5-20 ms, 4 ms like this.
      const QSignalBlocker quiet(table_->model());
      for (const auto& [key, rec] : latest_) updateRow(rec);
    }
    table_->viewport()->update();
    if (newlyEnded) table_->resizeColumnToContents(Verdict);  // "ended 06:07:48" whole
    table_->setSortingEnabled(true);
    updateStragglers();
  });
  tableTimer->start();
}

MonitorWorkspace::~MonitorWorkspace() {
  // Join the job's thread before the children go, so nothing reports into a half-destroyed
  // workspace (and no emission is still running while its connections are dropped).
  source_->stopAndWait();
  source_->disconnect(this);
  sessionExport_->stopAndWait();  // a save under way stops; its temporary file goes
  sessionExport_->disconnect(this);
  background_settings::set({{"monitor/address", address_->text()}, {"monitor/prometheus", prometheus_->text()}});
  background_settings::flush();  // in the file before the application ends
  if (session_) session_->remove();
}

void MonitorWorkspace::setAddress(const QString& address) { address_->setText(address); }
void MonitorWorkspace::setPrometheusAddress(const QString& address) { prometheus_->setText(address); }
int MonitorWorkspace::prometheusPort() const { return metricsServer_ ? metricsServer_->port() : 0; }
QString MonitorWorkspace::statusText() const { return status_->text(); }
QString MonitorWorkspace::stragglerText() const { return stragglers_ ? banner_->text() : QString(); }

void MonitorWorkspace::listen() {
  if (!source_->listen(address_->text().trimmed())) return;
  background_settings::set({{"monitor/address", address_->text()}});  // not synced on the GUI thread
  beginSession();
}

void MonitorWorkspace::connectToPublisher() {
  if (!source_->connectTo(address_->text().trimmed())) return;
  background_settings::set({{"monitor/address", address_->text()}});  // not synced on the GUI thread
  beginSession();
}

void MonitorWorkspace::followFile(const QString& path) {
  if (source_->follow(path)) beginSession();
}

void MonitorWorkspace::beginSession() {
  records_ = 0;
  fileNote_.clear();  // a save of the last session is not this one's
  sourceText_.clear();
  plots_->clear();
  stages_->clear();
  heatMap_->clear();
  table_->setRowCount(0);
  rows_.clear();
  latest_.clear();
  arrivals_.clear();
  clock_.start();
  tuneButton_->setEnabled(false);
  refusedRows_ = 0;
  showStragglers({});
  viewChosen_ = false;
  views_->setCurrentIndex(0);
  // The session is recorded as it arrives, in the temp folder (never the home): Save copies it.
  if (session_) session_->remove();
  sessionFull_ = false;
  session_ = std::make_unique<QFile>(QDir::temp().filePath("stoker-monitor-" + QUuid::createUuid().toString(QUuid::WithoutBraces) + ".jsonl"));
  if (!session_->open(QIODevice::WriteOnly | QIODevice::Truncate)) session_.reset();
  // The endpoint serves this session's ranks; a bad address is said in the status, the session goes on.
  metricsServer_.reset();
  exporter_ = std::make_unique<PrometheusExporter>();
  QString metricsNote;
  if (const QString address = prometheus_->text().trimmed(); !address.isEmpty()) {
    try {
      PrometheusExporter* e = exporter_.get();
      metricsServer_ = std::make_unique<MetricsHttpServer>(address.toStdString(), [e] { return e->render(); });
      metricsNote = tr("; Prometheus metrics on port %1").arg(metricsServer_->port());
    } catch (const Error& e) {
      metricsNote = tr("; no Prometheus endpoint: %1").arg(QString::fromUtf8(e.what()));
    }
  }
  metricsNote_ = metricsNote;
  for (auto* b : {listenButton_, connectButton_, followButton_}) b->setEnabled(false);
  stopButton_->setEnabled(true);
  saveButton_->setEnabled(session_ != nullptr);
  exportButton_->setEnabled(session_ != nullptr);
  drainTimer_->start();
}

void MonitorWorkspace::stop() { source_->stop(); }

const TelemetryRecord* MonitorWorkspace::newest(int rank, const QString& device, SeriesKey* key) const {
  const TelemetryRecord* best = nullptr;
  const std::string dev = device.toStdString();
  for (auto it = latest_.lower_bound(SeriesKey{rank, dev, {}, std::numeric_limits<std::int64_t>::min(), {}});
       it != latest_.end() && std::get<0>(it->first) == rank && std::get<1>(it->first) == dev; ++it)
    if (!best || it->second.time >= best->time) {
      best = &it->second;
      if (key) *key = it->first;
    }
  return best;
}

QTableWidgetItem* MonitorWorkspace::rowItem(int rank, const QString& device) const {
  SeriesKey key;
  if (!newest(rank, device, &key)) return nullptr;
  const auto it = rows_.find(key);
  return it == rows_.end() ? nullptr : it->second;
}

int MonitorWorkspace::liveSeries() const {
  int live = 0;
  for (const auto& [key, rec] : latest_) live += !ended(key);
  return live;
}

// The table is full: a series that ended makes room for a live one (restarts of a 256-rank
// job would otherwise fill the 4096 rows with the dead). False when none has ended.
bool MonitorWorkspace::forgetAnEndedSeries() {
  for (auto it = latest_.begin(); it != latest_.end(); ++it) {
    if (!ended(it->first)) continue;
    if (const auto row = rows_.find(it->first); row != rows_.end()) {
      table_->removeRow(row->second->row());
      rows_.erase(row);
    }
    arrivals_.erase(it->first);
    latest_.erase(it);
    return true;
  }
  return false;
}

bool MonitorWorkspace::ended(const SeriesKey& key) const {
  const auto it = arrivals_.find(key);
  if (it == arrivals_.end() || !clock_.isValid()) return false;
  const double quiet = static_cast<double>(clock_.elapsed() - it->second.lastMs);
  return quiet > std::max(static_cast<double>(endedMs_), kEndedIntervals * it->second.intervalMs);
}

void MonitorWorkspace::updateRow(const TelemetryRecord& rec) {
  const QString device = QString::fromStdString(rec.device);
  const SeriesKey id = seriesKey(rec);
  QTableWidgetItem* key = rows_.count(id) ? rows_.at(id) : nullptr;
  if (!key) {
    const int at = nextNewRow_++;  // made empty by the refresh
    for (int c = 0; c < Columns; ++c) table_->setItem(at, c, new SortItem);
    key = table_->item(at, Rank);
    // Rows of one rank in device order, then by job.
    key->setData(kSecondaryRole, device + QString(" %1 %2").arg(QString::fromStdString(rec.host)).arg(rec.pid, 12, 10, QChar('0')));
    rows_[id] = key;
  }
  const int row = key->row();
  const double share = dataWaitShare(rec.data_wait_ms, rec.step_ms);
  const bool over = ended(id);
  const InputBound b = over ? InputBound::Unknown : classifyInputBound(share);
  const QString lastSeen = over ? QDateTime::fromSecsSinceEpoch(static_cast<qint64>(rec.time)).toString("HH:mm:ss") : QString();
  const QString endedTip = over ? tr("No record since %1: this loader stopped publishing (its job ended or died)").arg(lastSeen)
                                : QString();
  key->setData(kEndedRole, over);
  struct Cell {
    QString text;
    QVariant number;
  };
  const Cell cells[Columns] = {
      {QString::number(rec.rank), rec.rank},
      {device, {}},
      {over ? tr("ended %1").arg(lastSeen) : QString::fromStdString(inputBoundName(b)),
       over ? QVariant(2.0) : QVariant(share)},
      {table_->item(row, StragglerCol)->text(), table_->item(row, StragglerCol)->data(Qt::UserRole)},  // updateStragglers
      {share < 0 ? kDash : QString("%1 %").arg(100 * share, 0, 'f', 1), share < 0 ? QVariant() : QVariant(share)},
      {QLocale().toString(rec.samples_per_s, 'f', 0), rec.samples_per_s},
      {isKnown(rec.bytes_per_s) ? QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rec.bytes_per_s))) + "/s"
                                : kDash,
       isKnown(rec.bytes_per_s) ? QVariant(rec.bytes_per_s) : QVariant()},
      {QString::number(rec.data_wait_ms, 'f', 2), rec.data_wait_ms},
      {QString::number(rec.step_ms, 'f', 2), rec.step_ms},
      {stagesText(rec), {}},
      {networkText(rec), isKnown(rec.net_requests) ? QVariant(static_cast<double>(rec.net_requests)) : QVariant()},
      {QString::number(rec.epoch), static_cast<double>(rec.epoch)},
      {rec.steps_total > 0 ? QString("%1/%2").arg(rec.step).arg(rec.steps_total) : QString::number(rec.step),
       static_cast<double>(rec.step)},
      {rec.source.empty() ? kDash : QString::fromStdString(rec.source), {}},
      {rec.loader.empty() ? kDash : QString::fromStdString(rec.loader), {}},
      {QString::fromStdString(rec.mode), {}},
      {QString::fromStdString(rec.host), {}},
      {QString::number(rec.pid), static_cast<double>(rec.pid)}};
  for (int c = 0; c < Columns; ++c) {
    QTableWidgetItem* item = table_->item(row, c);
    if (item->text() != cells[c].text) item->setText(cells[c].text);
    if (cells[c].number.isValid()) item->setData(Qt::UserRole, cells[c].number);
    const QString tip = over ? endedTip : c == Stages || c == Network ? cells[c].text : QString();
    if (item->toolTip() != tip) item->setToolTip(tip);
    if (c != StragglerCol || item->text().isEmpty()) item->setBackground(verdictColour(b));
    item->setForeground(over ? palette().brush(QPalette::Disabled, QPalette::Text) : palette().brush(QPalette::Text));
  }
  QFont f = table_->item(row, Verdict)->font();
  if (f.bold() != (b == InputBound::InputBound)) {
    f.setBold(b == InputBound::InputBound);
    table_->item(row, Verdict)->setFont(f);
  }
}

void MonitorWorkspace::updateStragglers() {
  std::vector<const TelemetryRecord*> series;  // a job that ended is no straggler
  for (const auto& [key, rec] : latest_)
    if (!ended(key)) series.push_back(&rec);
  const auto stragglers = findStragglers(liveRankTimings(series));
  QHash<QPair<int, QString>, QString> marks;
  QStringList lines;
  for (const auto& s : stragglers) {
    marks[{s.rank, QString::fromStdString(s.device)}] = tr("◀ %1").arg(QString::fromStdString(s.metric));
    lines << QString::fromStdString(describeStraggler(s));
  }
  table_->setSortingEnabled(false);
  for (const auto& [id, key] : rows_) {
    QTableWidgetItem* item = table_->item(key->row(), StragglerCol);
    const QString mark = ended(id) ? QString() : marks.value({std::get<0>(id), QString::fromStdString(std::get<1>(id))});
    if (item->text() != mark) {
      item->setText(mark);
      item->setData(Qt::UserRole, mark.isEmpty() ? 0.0 : 1.0);
      item->setBackground(mark.isEmpty() ? table_->item(key->row(), Verdict)->background()
                                         : QBrush(QColor(198, 40, 40, 200)));
    }
  }
  table_->setSortingEnabled(true);
  showStragglers(lines);
}

void MonitorWorkspace::showStragglers(const QStringList& lines) {
  const QString text = lines.isEmpty()
                           ? (latest_.empty() ? QString(" ")  // keeps the line's height until records come
                                              : tr("No straggler: no rank's data wait or step is far from the others'."))
                           : tr("Straggler%1: %2").arg(lines.size() > 1 ? "s" : "").arg(lines.join("; "));
  if (text == banner_->text()) return;
  banner_->setText(text);
  banner_->setStyleSheet(lines.isEmpty() ? "QLabel { padding: 4px; border: 1px solid transparent; }"
                                         : "QLabel { background: rgba(198, 40, 40, 40); border: 1px solid "
                                           "rgb(198, 40, 40); border-radius: 3px; padding: 4px; }");
  stragglers_ = !lines.isEmpty();
}

QString MonitorWorkspace::verdict(int rank, const QString& device) const {
  return cellText(rank, device, kHeaders[Verdict]);
}

bool MonitorWorkspace::tuneLoader(int rank, const QString& device) {
  const TelemetryRecord* found = newest(rank, device);
  if (!found) {
    status_->setText(tr("No records from rank %1 %2.").arg(rank).arg(device));
    return false;
  }
  const TelemetryRecord& r = *found;
  if (r.options.empty() || r.dataset.empty()) {
    status_->setText(tr("Rank %1 %2 does not send its dataset and options (stoker.Loader in a Python script does; "
                        "a DataLoader watched by the probe cannot): nothing to tune.")
                         .arg(rank)
                         .arg(device));
    return false;
  }
  Q_EMIT tuneRequested(QString::fromStdString(r.dataset), QString::fromStdString(r.options));
  return true;
}

QString MonitorWorkspace::cellText(int rank, const QString& device, const QString& header) const {
  const QTableWidgetItem* key = rowItem(rank, device);
  if (!key) return {};
  for (int c = 0; c < Columns; ++c)
    if (header == kHeaders[c]) return table_->item(key->row(), c)->text();
  return {};
}

bool MonitorWorkspace::saveSession(const QString& path) {
  if (!session_ || sessionExport_->busy()) return false;
  session_->flush();
  sessionExportPath_ = path;
  return sessionExport_->saveCopy(session_->fileName(), session_->size(), path);
}

bool MonitorWorkspace::writingSession() const { return sessionExport_->busy(); }

bool MonitorWorkspace::exportSession(const QString& path) {
  if (!session_ || sessionExport_->busy()) return false;
  const QFileInfo info(path);
  const QString base = info.dir().filePath(info.suffix() == "png" || info.suffix() == "csv" ? info.completeBaseName()
                                                                                              : info.fileName());
  // Both views at the size of the one shown (the hidden one has no size of its own yet).
  const QSize size = views_->currentWidget()->size();
  if (!plots_->isVisible()) plots_->resize(size);
  bool ok = plots_->grab().save(base + ".png");
  ok = heatMap_->savePng(base + "-heatmap.png", size.width(), size.height()) && ok;
  // The CSV comes from the recorded session, so it holds every record, not only what the plots keep.
  session_->flush();
  sessionExportPath_ = base + ".csv";
  return ok && sessionExport_->saveCsv(session_->fileName(), session_->size(), sessionExportPath_);
}

void MonitorWorkspace::drain() {
  auto records = source_->takeRecords();
  if (!records.empty()) {
    // A row per series (rank, device, host, pid, loader), up to kMaxRows: a peer inventing ranks cannot grow the table, the
    // plots' series or the heat map without bound.
    std::vector<TelemetryRecord> accepted;
    accepted.reserve(records.size());
    const qint64 now = clock_.isValid() ? clock_.elapsed() : 0;  // once per drain, not per record
    for (auto& rec : records) {
      const SeriesKey id = seriesKey(rec);
      if (latest_.size() >= kMaxRows && !latest_.count(id) && !forgetAnEndedSeries()) {
        ++refusedRows_;
        continue;
      }
      latest_[id] = rec;
      Arrivals& a = arrivals_[id];
      const bool paused = static_cast<double>(now - a.lastMs) > std::max(static_cast<double>(endedMs_), kEndedIntervals * a.intervalMs);
      if (a.lastMs > 0 && now > a.lastMs && !paused)  // the usual interval, not stretched by a pause
        a.intervalMs = a.intervalMs > 0 ? 0.8 * a.intervalMs + 0.2 * static_cast<double>(now - a.lastMs)
                                        : static_cast<double>(now - a.lastMs);
      a.lastMs = std::max<qint64>(now, 1);
      accepted.push_back(std::move(rec));
    }
    plots_->addRecords(accepted);
    stages_->addRecords(accepted);
    heatMap_->addRecords(accepted);
    QByteArray lines;
    for (const auto& rec : accepted) {
      if (metricsServer_) exporter_->onRecord(rec);
      lines += QByteArray::fromStdString(telemetryToJson(rec)) + '\n';
    }
    tableDirty_ = true;
    if (session_ && session_->size() + lines.size() <= kMaxSessionBytes) session_->write(lines);
    else if (session_) sessionFull_ = true;
    // Past 8 series a line each is unreadable: show the heat map once, unless the user chose a view.
    if (!viewChosen_ && views_->currentIndex() == 0 && latest_.size() > kShowHeatMapAbove && liveSeries() > kShowHeatMapAbove)
      views_->setCurrentIndex(1);
    records_ += static_cast<qint64>(accepted.size());
    if (!tuneButton_->isEnabled())
      tuneButton_->setEnabled(std::any_of(accepted.begin(), accepted.end(), [](const TelemetryRecord& r) {
        return !r.options.empty() && !r.dataset.empty();
      }));
    Q_EMIT recordsArrived(static_cast<int>(accepted.size()));
  }
  if (!sourceText_.isEmpty() && records_ > 0)
    status_->setText(tr("%1: %2 records from %3 connection(s), %4 ranks/devices; %5 unreadable lines%6")
                         .arg(sourceText_)
                         .arg(records_)
                         .arg(source_->connections())
                         .arg(latest_.size())
                         .arg(source_->badLines())
                         .arg(metricsNote_ + fileNote_ + (sessionFull_ ? tr("; recording stopped at 2 GiB (Save keeps it)") : QString()) +
                              (refusedRows_ ? tr("; %1 records of ranks beyond the table's 4096 rows ignored").arg(refusedRows_)
                                            : QString())));
}

}  // namespace stoker
