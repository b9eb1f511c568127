#include "monitor_workspace.h"

#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include "telemetry/input_bound.h"
#include "telemetry_plots.h"
#include "telemetry_source.h"
#include "util/byte_size.h"

namespace stoker {
namespace {

// The verdict first: it is what the table is for.
enum Column { Rank, Device, Verdict, Share, SamplesPerS, Bandwidth, Wait, StepMs, Epoch, Step, Mode, Host, Pid, Columns };
const char* kHeaders[Columns] = {"rank", "device", "verdict", "wait share", "samples/s", "bytes/s", "data wait ms",
                                 "step ms", "epoch", "step", "mode", "host", "pid"};

QColor verdictColour(InputBound b) {
  switch (b) {
    case InputBound::Fine: return QColor(46, 125, 50, 90);
    case InputBound::Moderate: return QColor(230, 160, 0, 110);
    case InputBound::InputBound: return QColor(198, 40, 40, 140);
    case InputBound::Unknown: break;
  }
  return QColor(0, 0, 0, 0);
}

}  // namespace

MonitorWorkspace::MonitorWorkspace(QWidget* parent)
    : QWidget(parent), source_(new TelemetrySource(this)), drainTimer_(new QTimer(this)) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* row = new QHBoxLayout;
  address_ = new QLineEdit(QSettings().value("monitor/address", ":29650").toString(), this);
  address_->setObjectName("address");
  address_->setToolTip(tr("HOST:PORT or :PORT to listen on. Ranks publish to it with "
                          "stoker feed/bench --publish HOST:PORT, or the trainer's --publish"));
  listenButton_ = new QPushButton(tr("Listen"), this);
  listenButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  listenButton_->setToolTip(tr("Accept telemetry from any number of ranks (Ctrl+R)"));
  followButton_ = new QPushButton(tr("Follow file…"), this);
  followButton_->setToolTip(tr("Read a telemetry file written with --publish file:PATH and keep reading as it grows"));
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  stopButton_->setEnabled(false);
  row->addWidget(new QLabel(tr("Address"), this));
  row->addWidget(address_, 1);
  row->addWidget(listenButton_);
  row->addWidget(followButton_);
  row->addWidget(stopButton_);
  outer->addLayout(row);
  status_ = new QLabel(tr("Not listening. Press Listen, then start a job with --publish to this address."), this);
  status_->setObjectName("status");
  outer->addWidget(status_);

  auto* split = new QSplitter(Qt::Vertical, this);
  plots_ = new TelemetryPlots(split);
  plots_->setLabelByRank(true);
  table_ = new QTableWidget(0, Columns, split);
  QStringList headers;
  for (const char* h : kHeaders) headers << tr(h);
  table_->setHorizontalHeaderLabels(headers);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->horizontalHeaderItem(Share)->setToolTip(tr("data wait ÷ (data wait + step): the share of each iteration "
                                                     "spent waiting for input"));
  table_->horizontalHeaderItem(Verdict)->setToolTip(tr("< 5 % fine, 5–20 % moderate, ≥ 20 % input-bound"));
  split->addWidget(plots_);
  split->addWidget(table_);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 1);
  split->setSizes({420, 200});
  outer->addWidget(split, 1);

  connect(listenButton_, &QPushButton::clicked, this, &MonitorWorkspace::listen);
  connect(followButton_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Telemetry file"), {}, tr("JSON lines (*.jsonl *.json *.log);;All files (*)"));
    if (!f.isEmpty()) followFile(f);
  });
  connect(stopButton_, &QPushButton::clicked, this, &MonitorWorkspace::stop);
  connect(source_, &TelemetrySource::listening, this, [this](int port) {
    port_ = port;
    sourceText_ = tr("Listening on port %1").arg(port);
    status_->setText(sourceText_ + tr(": no records yet."));
    Q_EMIT listening(port);
  });
  connect(source_, &TelemetrySource::following, this, [this](const QString& path) {
    sourceText_ = tr("Following %1").arg(path);
    status_->setText(sourceText_);
  });
  auto ended = [this] {
    drain();
    drainTimer_->stop();
    listenButton_->setEnabled(true);
    followButton_->setEnabled(true);
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
}

MonitorWorkspace::~MonitorWorkspace() {
  // Join the job's thread before the children go, so nothing reports into a half-destroyed
  // workspace (and no emission is still running while its connections are dropped).
  source_->stopAndWait();
  source_->disconnect(this);
  QSettings().setValue("monitor/address", address_->text());
}

void MonitorWorkspace::setAddress(const QString& address) { address_->setText(address); }
QString MonitorWorkspace::statusText() const { return status_->text(); }

void MonitorWorkspace::listen() {
  if (!source_->listen(address_->text().trimmed())) return;
  QSettings().setValue("monitor/address", address_->text());
  beginSession();
}

void MonitorWorkspace::followFile(const QString& path) {
  if (source_->follow(path)) beginSession();
}

void MonitorWorkspace::beginSession() {
  records_ = 0;
  sourceText_.clear();
  plots_->clear();
  table_->setRowCount(0);
  listenButton_->setEnabled(false);
  followButton_->setEnabled(false);
  stopButton_->setEnabled(true);
  drainTimer_->start();
}

void MonitorWorkspace::stop() { source_->stop(); }

int MonitorWorkspace::rowFor(int rank, const QString& device) {
  for (int r = 0; r < table_->rowCount(); ++r)
    if (table_->item(r, Rank)->text().toInt() == rank && table_->item(r, Device)->text() == device) return r;
  // Keep rows ordered by rank, then device.
  int at = 0;
  while (at < table_->rowCount() && (table_->item(at, Rank)->text().toInt() < rank ||
                                     (table_->item(at, Rank)->text().toInt() == rank && table_->item(at, Device)->text() < device)))
    ++at;
  table_->insertRow(at);
  for (int c = 0; c < Columns; ++c) table_->setItem(at, c, new QTableWidgetItem);
  table_->item(at, Rank)->setText(QString::number(rank));
  table_->item(at, Device)->setText(device);
  return at;
}

QString MonitorWorkspace::verdict(int rank, const QString& device) const {
  for (int r = 0; r < table_->rowCount(); ++r)
    if (table_->item(r, Rank)->text().toInt() == rank && table_->item(r, Device)->text() == device)
      return table_->item(r, Verdict)->text();
  return {};
}

void MonitorWorkspace::drain() {
  const auto records = source_->takeRecords();
  if (!records.empty()) {
    plots_->addRecords(records);
    for (const auto& rec : records) {
      const int row = rowFor(rec.rank, QString::fromStdString(rec.device));
      const double share = dataWaitShare(rec.data_wait_ms, rec.step_ms);
      const InputBound b = classifyInputBound(share);
      const QString cells[Columns] = {
          QString::number(rec.rank), QString::fromStdString(rec.device), QString::fromStdString(inputBoundName(b)),
          share < 0 ? QString("–") : QString("%1 %").arg(100 * share, 0, 'f', 1),
          QString::number(rec.samples_per_s, 'f', 0),
          isKnown(rec.bytes_per_s) ? QString::fromStdString(humanBytes(static_cast<std::uint64_t>(rec.bytes_per_s))) + "/s"
                                   : QString("—"),
          QString::number(rec.data_wait_ms, 'f', 2), QString::number(rec.step_ms, 'f', 2), QString::number(rec.epoch),
          rec.steps_total > 0 ? QString("%1/%2").arg(rec.step).arg(rec.steps_total) : QString::number(rec.step),
          QString::fromStdString(rec.mode), QString::fromStdString(rec.host), QString::number(rec.pid)};
      for (int c = 0; c < Columns; ++c) {
        QTableWidgetItem* item = table_->item(row, c);
        item->setText(cells[c]);
        item->setBackground(verdictColour(b));
      }
      QFont f = table_->item(row, Verdict)->font();
      f.setBold(b == InputBound::InputBound);
      table_->item(row, Verdict)->setFont(f);
    }
    records_ += static_cast<qint64>(records.size());
    Q_EMIT recordsArrived(static_cast<int>(records.size()));
  }
  if (!sourceText_.isEmpty() && records_ > 0)
    status_->setText(tr("%1: %2 records from %3 connection(s), %4 ranks/devices; %5 unreadable lines")
                         .arg(sourceText_)
                         .arg(records_)
                         .arg(source_->connections())
                         .arg(table_->rowCount())
                         .arg(source_->badLines()));
}

}  // namespace stoker
