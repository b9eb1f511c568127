#include "rank_heat_map.h"

#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "telemetry/input_bound.h"

namespace stoker {

namespace {

// Rows for ranks 0..4095: a hostile or broken publisher's rank 2^31 must not allocate a map of it.
constexpr int kMaxRanks = 4096;

// The wait share's colours follow the verdicts: green below 5 %, amber to 20 %, red beyond.
QCPColorGradient shareGradient() {
  QCPColorGradient g;
  g.clearColorStops();
  g.setColorStopAt(0.0, QColor(46, 125, 50));
  g.setColorStopAt(0.049, QColor(102, 187, 106));
  g.setColorStopAt(0.05, QColor(255, 213, 79));
  g.setColorStopAt(0.199, QColor(245, 124, 0));
  g.setColorStopAt(0.2, QColor(229, 57, 53));
  g.setColorStopAt(1.0, QColor(127, 0, 0));
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

QCPColorGradient rateGradient() {
  QCPColorGradient g(QCPColorGradient::gpThermal);
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

}  // namespace

RankHeatMap::RankHeatMap(QWidget* parent) : QWidget(parent), plot_(new QCustomPlot(this)), timer_(new QTimer(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(plot_);
  plot_->setObjectName("heat_map");
  plot_->setMinimumSize(300, 200);
  plot_->plotLayout()->insertRow(0);
  plot_->plotLayout()->addElement(0, 0, new QCPTextElement(plot_, QString(), QFont(font().family(), 9, QFont::Bold)));
  plot_->xAxis->setLabel(tr("seconds (0 = now)"));
  plot_->yAxis->setLabel(tr("rank"));
  plot_->yAxis->setRangeReversed(true);  // rank 0 at the top, like the table
  QSharedPointer<QCPAxisTickerFixed> rankTicks(new QCPAxisTickerFixed);  // ranks are whole numbers
  rankTicks->setTickStep(1);
  rankTicks->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  plot_->yAxis->setTicker(rankTicks);
  map_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
  map_->setInterpolate(false);
  scale_ = new QCPColorScale(plot_);
  plot_->plotLayout()->addElement(1, 1, scale_);
  map_->setColorScale(scale_);
  auto* margins = new QCPMarginGroup(plot_);
  plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  scale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  setFigure(WaitShare);
  timer_->setInterval(250);  // a heat map of seconds needs no more than 4 redraws a second
  connect(timer_, &QTimer::timeout, this, [this] { redraw(); });
  timer_->start();
}

void RankHeatMap::setFigure(Figure f) {
  figure_ = f;
  auto* title = static_cast<QCPTextElement*>(plot_->plotLayout()->element(0, 0));
  if (f == WaitShare) {
    title->setText(tr("Data-wait share per rank: green < 5 %, amber 5–20 %, red ≥ 20 % input-bound"));
    scale_->axis()->setLabel(tr("wait ÷ (wait + step)"));
    map_->setGradient(shareGradient());
  } else {
    title->setText(tr("Samples/s per rank"));
    scale_->axis()->setLabel(tr("samples/s"));
    map_->setGradient(rateGradient());
  }
  dirty_ = true;
  redraw();
}

void RankHeatMap::addRecords(const std::vector<TelemetryRecord>& records) {
  for (const auto& r : records) {
    if (r.rank < 0 || r.rank >= kMaxRanks || !std::isfinite(r.time)) continue;
    const long long second = static_cast<long long>(std::floor(r.time));
    Cell& c = cells_[r.rank][second];
    const double share = dataWaitShare(r.data_wait_ms, r.step_ms);
    if (share >= 0) {
      c.share += share;
      ++c.shareCount;
    }
    if (std::isfinite(r.samples_per_s)) {
      c.rate += r.samples_per_s;
      ++c.rateCount;
    }
    latestSecond_ = std::max(latestSecond_, second);
    dirty_ = true;
  }
}

double RankHeatMap::cell(int rank, double unixTime) const {
  const auto row = cells_.find(rank);
  if (row == cells_.end()) return qQNaN();
  const auto c = row->second.find(static_cast<long long>(std::floor(unixTime)));
  if (c == row->second.end()) return qQNaN();
  if (figure_ == WaitShare) return c->second.shareCount ? c->second.share / c->second.shareCount : qQNaN();
  return c->second.rateCount ? c->second.rate / c->second.rateCount : qQNaN();
}

void RankHeatMap::resizeEvent(QResizeEvent* event) {
  dirty_ = true;  // the rows may group differently
  QWidget::resizeEvent(event);
}

double RankHeatMap::shownValue(int rank, double unixTime) const {
  QCPColorMapData* data = map_->data();  // QCPColorMapData::cell is not const
  const long long x = static_cast<long long>(std::floor(unixTime)) - firstSecond_;
  const int y = rank / group_;
  if (x < 0 || x >= data->keySize() || y < 0 || y >= data->valueSize()) return qQNaN();
  return data->cell(static_cast<int>(x), y);
}

void RankHeatMap::clear() {
  cells_.clear();
  latestSecond_ = 0;
  dirty_ = true;
  redraw();
}

bool RankHeatMap::savePng(const QString& path, int width, int height) {
  dirty_ = true;
  redraw(true);
  return plot_->savePng(path, width, height);
}

void RankHeatMap::redraw(bool evenIfHidden) {
  if (!dirty_) return;
  long long first = latestSecond_ - windowSeconds_ + 1;
  long long earliest = latestSecond_;
  // Seconds out of the window go while the map is hidden too (the Plots tab, another workspace):
  // 256 ranks added 256 cells a second for as long as the Monitor listened.
  for (auto& [rank, row] : cells_) {
    row.erase(row.begin(), row.lower_bound(first));
    if (!row.empty()) earliest = std::min(earliest, row.begin()->first);
  }
  if (!isVisible() && !evenIfHidden) return;  // still dirty: drawn once shown
  dirty_ = false;
  // A young session fills the width: the window grows with it from 30 s up to windowSeconds.
  const int columns = static_cast<int>(std::clamp<long long>(latestSecond_ - earliest + 1, 30, windowSeconds_));
  first = latestSecond_ - columns + 1;
  firstSecond_ = first;
  const int ranks = cells_.empty() ? 1 : cells_.rbegin()->first + 1;
  // More ranks than pixel rows: a row stands for several ranks and shows the worst of them (the
  // highest wait share, the lowest rate), so one starved rank among 256 stays visible.
  const int pixelRows = std::max(1, plot_->axisRect()->height());
  // The plot lays itself out when it replots: after a resize, group again once the height settles.
  if (pixelRows != pixelRows_) dirty_ = true;
  pixelRows_ = pixelRows;
  group_ = (ranks + pixelRows - 1) / pixelRows;
  const int rows = (ranks + group_ - 1) / group_;
  auto* data = map_->data();
  // QCPColorMap draws a map of one row with no height (its cells span the distance between the
  // first and last row's centres): a single rank is drawn as two identical half-height rows.
  const bool oneRow = ranks == 1;
  data->setSize(columns, oneRow ? 2 : rows);
  data->setRange(QCPRange(-(columns - 1), 0), oneRow ? QCPRange(-0.25, 0.25)
                                                     : QCPRange(0.5 * (group_ - 1), (rows - 1) * group_ + 0.5 * (group_ - 1)));
  data->fill(qQNaN());
  double top = 0;
  for (const auto& [rank, row] : cells_)
    for (const auto& [second, c] : row) {
      const double v = figure_ == WaitShare ? (c.shareCount ? c.share / c.shareCount : qQNaN())
                                            : (c.rateCount ? c.rate / c.rateCount : qQNaN());
      if (!std::isfinite(v)) continue;
      const int x = static_cast<int>(second - first), y = rank / group_;
      const double old = data->cell(x, y);
      const bool worse = std::isnan(old) || (figure_ == WaitShare ? v > old : v < old);
      if (worse) data->setCell(x, y, v);
      if (worse && oneRow) data->setCell(x, 1, v);
      top = std::max(top, v);
    }
  map_->setDataRange(figure_ == WaitShare ? QCPRange(0, 1) : QCPRange(0, std::max(top, 1.0)));
  plot_->xAxis->setRange(-(columns - 0.5), 0.5);
  plot_->yAxis->setRange(-0.5, ranks - 0.5);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace stoker
