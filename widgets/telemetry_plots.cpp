#include "telemetry_plots.h"

#include <QEvent>
#include <QGridLayout>
#include <QLocale>
#include <QTimer>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "plan_grid_view.h"

namespace stoker {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A figure the publisher did not know plots as a gap, never as 0 or -1.
template <class T>
double known(T v) {
  return isKnown(v) ? static_cast<double>(v) : qQNaN();
}

struct PlotText {
  const char* title;
  const char* yLabel;
  const char* y2Label;  // nullptr: no right axis
  int graphsPerSeries;
  int rightGraph;       // the graph drawn against the right axis, -1: none
};

// Memory: the device's total is a share on the right axis, not a line beside
// used/reserved -- 24 GiB of host RAM drawn on the same axis flattened the
// loader's few hundred MiB to zero.
const PlotText kPlots[TelemetryPlots::PlotCount] = {
    {"Throughput: samples/s ± p10-p90, MB/s dashed", "samples/s", "MB/s", 4, 1},
    {"Memory: used, reserved dashed, % total dotted", "MiB", "% of total", 3, 2},
    {"Prefetch: depth, ready batches dashed", "batches", nullptr, 2, -1},
    {"Batch latency: p50, p99 dashed", "ms", nullptr, 2, -1},
};

const Qt::PenStyle kStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::NoPen};
// Each plot's main figure, as an index into addRecords' values: samples/s, used MiB, depth, p50.
constexpr int kMainValue[TelemetryPlots::PlotCount] = {0, 4, 7, 9};
// Aggregate mode: one point per half second of record time, from series heard from in the last 5 s.
constexpr double kBucketSeconds = 0.5;
constexpr double kStaleSeconds = 5;
constexpr qsizetype kMaxSeries = 4096;  // series kept; records of new ones beyond are not plotted
constexpr std::size_t kBandReports = 10;
// A series silent for longer than this many of its usual intervals (and at least kMinGapSeconds)
// is drawn with a gap.
constexpr double kGapIntervals = 5;
constexpr double kMinGapSeconds = 2;
// The y axes scale to what matters: values above kClipFactor x the window's 95th percentile are
// clipped (drawn as a triangle on the top edge), so one spike never flattens a steady line.
constexpr double kClipFactor = 3;
constexpr double kClipQuantile = 0.95;
constexpr double kRecentSeconds = 3;

// The q-quantile (0..1) of a few values, by nearest rank.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

TelemetryPlots::TelemetryPlots(QWidget* parent) : QWidget(parent), timer_(new QTimer(this)) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  for (int p = 0; p < PlotCount; ++p) {
    auto* plot = new QCustomPlot(this);
    plot->setObjectName(QString("plot_%1").arg(p));
    plot->setNotAntialiasedElements(QCP::aeAll);  // live plots: thin, aliased pens
    plot->setMinimumSize(220, 150);
    plot->plotLayout()->insertRow(0);
    plot->plotLayout()->addElement(0, 0, new QCPTextElement(plot, tr(kPlots[p].title), QFont(font().family(), 9, QFont::Bold)));
    plot->installEventFilter(this);  // the title goes on two lines when the plot is too narrow for one
    plot->yAxis->setLabel(tr(kPlots[p].yLabel));
    plot->xAxis->setLabel(tr("seconds"));
    if (kPlots[p].y2Label) {
      plot->yAxis2->setVisible(true);
      plot->yAxis2->setLabel(tr(kPlots[p].y2Label));
    }
    if (p == Throughput) {  // the legend appears with the first series
      plot->legend->setFont(QFont(font().family(), 8));
      // In rows under the plot, never over the curves: inside the axis rect it covered the band
      // of a run whose throughput sits where the box was.
      plot->axisRect()->insetLayout()->take(plot->legend);
      plot->plotLayout()->addElement(2, 0, plot->legend);
      plot->plotLayout()->setRowStretchFactor(2, 0.001);
      plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
      plot->legend->setWrap(2);  // a rank's name is long: three a row would set the window's minimum width
      plot->legend->setMargins(QMargins(4, 0, 4, 0));
      plot->legend->setRowSpacing(0);
      plot->plotLayout()->setRowSpacing(0);
    }
    noData_[p] = new QCPItemText(plot);
    noData_[p]->position->setType(QCPItemPosition::ptAxisRectRatio);
    noData_[p]->position->setCoords(0.5, 0.5);
    noData_[p]->setText(tr("not reported by these publishers"));
    noData_[p]->setColor(palette().color(QPalette::PlaceholderText));
    noData_[p]->setVisible(false);
    clipNote_[p] = new QCPItemText(plot);
    clipNote_[p]->position->setType(QCPItemPosition::ptAxisRectRatio);
    clipNote_[p]->position->setCoords(0.01, 0.99);  // bottom left: marker labels take the top rows
    clipNote_[p]->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    clipNote_[p]->setFont(QFont(font().family(), 8));
    clipNote_[p]->setVisible(false);
    plots_[p] = plot;
    addClipGraph(p);
    grid->addWidget(plot, p / 2, p % 2);
  }
  applyPalette();
  // Redraw at 25 Hz, and only when records arrived: an idle workspace costs nothing.
  timer_->setInterval(40);
  connect(timer_, &QTimer::timeout, this, &TelemetryPlots::redraw);
  timer_->start();
}

// The triangles on the top edge where values lie above the axis (robustTop fills it).
void TelemetryPlots::addClipGraph(int p) {
  clipGraph_[p] = plots_[p]->addGraph();
  clipGraph_[p]->setLineStyle(QCPGraph::lsNone);
  clipGraph_[p]->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, QColor(198, 40, 40), QColor(198, 40, 40), 7));
  clipGraph_[p]->removeFromLegend();
}

TelemetryPlots::Series& TelemetryPlots::seriesFor(const QString& label) {
  auto it = series_.find(label);
  if (it != series_.end()) return *it;
  Series s;
  const QColor colour = PlanGridView::rankColor(static_cast<int>(seriesOrder_.size())).darker(115);
  for (int p = 0; p < PlotCount && !aggregated_; ++p) {  // aggregate mode draws no line per series
    for (int g = 0; g < kPlots[p].graphsPerSeries; ++g) {
      const bool right = g == kPlots[p].rightGraph;
      QCPGraph* graph = plots_[p]->addGraph(plots_[p]->xAxis, right ? plots_[p]->yAxis2 : plots_[p]->yAxis);
      graph->setPen(QPen(colour, 1, kStyles[std::min(g, 3)]));
      graph->setName(g == 0 ? label : QString());
      if (g > 0 && p == Throughput) graph->removeFromLegend();
      if (p == Throughput && g == 3) {  // the band: filled between p10 (graph 2) and p90 (graph 3)
        QColor fill = colour;
        fill.setAlpha(50);
        graph->setBrush(fill);
        graph->setChannelFillGraph(s.graphs.back());
      }
      s.graphs.push_back(graph);
    }
  }
  seriesOrder_ << label;
  plots_[Throughput]->legend->setVisible(true);
  return *series_.insert(label, s);
}

void TelemetryPlots::addRecords(const std::vector<TelemetryRecord>& records) {
  for (const auto& r : records) {
    if (origin_ < 0) origin_ = r.time;
    const double x = r.time - origin_;
    QString label = QString::fromStdString(r.device);
    if (r.worker > 0) label += QString(" #%1").arg(r.worker);
    if (labelByRank_) label = seriesLabel(r, QString("rank %1 %2").arg(r.rank).arg(label));
    if (series_.size() >= kMaxSeries && !series_.contains(label)) continue;  // a peer inventing names
    Series& s = seriesFor(label);
    s.recentRates.push_back(r.samples_per_s);
    if (s.recentRates.size() > kBandReports) s.recentRates.erase(s.recentRates.begin());
    const double values[] = {
        r.samples_per_s, r.bytes_per_s / 1e6,                                              // throughput
        quantile(s.recentRates, 0.1), quantile(s.recentRates, 0.9),                        //   its band
        known(r.mem_used) / kMiB, known(r.mem_reserved) / kMiB,                            // memory
        r.mem_total > 0 && isKnown(r.mem_used) ? 100.0 * static_cast<double>(r.mem_used) / static_cast<double>(r.mem_total)
                                               : qQNaN(),
        known(r.prefetch_depth), known(r.ready),                                           // prefetch
        r.batch_latency_p50_ms, r.batch_latency_p99_ms,                                    // latency
    };
    if (aggregated_) {
      if (bucketEnd_ < 0) bucketEnd_ = (std::floor(x / kBucketSeconds) + 1) * kBucketSeconds;
      if (x >= bucketEnd_) {  // the record opens a later bucket: the one before is complete
        closeBucket(bucketEnd_);
        bucketEnd_ = (std::floor(x / kBucketSeconds) + 1) * kBucketSeconds;
      }
    } else {
      // A silence is a gap, never a straight line across it (a publisher that stopped, a job
      // that ended and another that began): a NaN point breaks every graph of the series.
      const bool gap = s.lastX >= 0 && x - s.lastX > std::max(kMinGapSeconds, kGapIntervals * s.interval);
      if (gap)
        for (auto* g : s.graphs) g->addData(s.lastX + 1e-6, qQNaN());
      else if (s.lastX >= 0 && x > s.lastX)  // the usual interval, never stretched by a silence
        s.interval = s.interval > 0 ? 0.8 * s.interval + 0.2 * (x - s.lastX) : x - s.lastX;
      s.lastX = std::max(s.lastX, x);
      for (std::size_t g = 0; g < s.graphs.size(); ++g) s.graphs[g]->addData(x, values[g]);
    }
    Latest& l = latestByLabel_[label];
    l.x = x;
    for (int p = 0; p < PlotCount; ++p) l.values[p] = values[kMainValue[p]];
    latest_ = std::max(latest_, x);
    dirty_ = true;
    if (!aggregated_ && aggregateAbove_ > 0 && series_.size() > aggregateAbove_ && liveSeries() > aggregateAbove_) aggregate();
  }
}

// The Monitor's names: see series_namer.h. A rename moves what was drawn under the old name.
QString TelemetryPlots::seriesLabel(const TelemetryRecord& r, const QString& base) {
  return namer_.name(r, base, [this](const QString& old, const QString& renamed) {
    if (series_.contains(old)) {
      Series moved = series_.take(old);
      for (int p = 0; p < PlotCount; ++p)  // each plot's main graph carries the name (the legend's)
        if (QCPGraph* g = graph(moved, static_cast<Plot>(p), 0)) g->setName(renamed);
      series_.insert(renamed, moved);
    }
    if (latestByLabel_.contains(old)) latestByLabel_.insert(renamed, latestByLabel_.take(old));
    const auto at = seriesOrder_.indexOf(old);
    if (at >= 0) seriesOrder_[at] = renamed;
  });
}

void TelemetryPlots::aggregate() {
  aggregated_ = true;
  for (auto* plot : plots_) plot->clearGraphs();
  trialGraph_ = nullptr;
  for (int p = 0; p < PlotCount; ++p) addClipGraph(p);
  for (auto& s : series_) s.graphs.clear();
  const QColor colour = palette().color(QPalette::Highlight);
  QColor fill = colour;
  fill.setAlpha(45);
  for (int p = 0; p < PlotCount; ++p) {
    QCustomPlot* plot = plots_[p];
    auto* g = aggregateGraphs_[p];
    g[1] = plot->addGraph();  // min
    g[2] = plot->addGraph();  // max, filled down to min: the band
    g[0] = plot->addGraph();  // median, drawn on top
    g[0]->setPen(QPen(colour, 2));
    g[1]->setPen(QPen(colour, 1, Qt::DashLine));
    g[2]->setPen(QPen(colour, 1, Qt::DashLine));
    g[2]->setBrush(fill);
    g[2]->setChannelFillGraph(g[1]);
    g[0]->setName(tr("median across ranks"));
    g[2]->setName(tr("min – max"));
    g[1]->removeFromLegend();
    if (p != Throughput) {
      g[0]->removeFromLegend();
      g[2]->removeFromLegend();
    }
  }
  plots_[Throughput]->legend->setVisible(true);
  bucketEnd_ = -1;
}

void TelemetryPlots::closeBucket(double x) {
  for (int p = 0; p < PlotCount; ++p) {
    std::vector<double> v;
    for (const auto& l : std::as_const(latestByLabel_))
      if (x - l.x <= kStaleSeconds && !std::isnan(l.values[p])) v.push_back(l.values[p]);
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const double median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    aggregateGraphs_[p][0]->addData(x, median);
    aggregateGraphs_[p][1]->addData(x, v.front());
    aggregateGraphs_[p][2]->addData(x, v.back());
    if (p == Throughput) aggregateGraphs_[p][0]->setName(tr("median across %1 ranks").arg(v.size()));
  }
}

QList<QPointF> TelemetryPlots::aggregatePoints(Plot plot, int g) const {
  QList<QPointF> out;
  if (!aggregated_ || g < 0 || g > 2) return out;
  const QCPGraph* gr = aggregateGraphs_[plot][g];
  for (auto d = gr->data()->constBegin(); d != gr->data()->constEnd(); ++d) out.push_back({d->key, d->value});
  return out;
}

void TelemetryPlots::addMarker(double unixTime, const QString& label) {
  if (origin_ < 0) origin_ = unixTime;
  const double x = unixTime - origin_;
  markers_.push_back({x, label});
  MarkerItems items;
  const QColor colour = palette().color(QPalette::Text);
  for (int p = 0; p < PlotCount; ++p) {
    auto* line = new QCPItemStraightLine(plots_[p]);
    line->setPen(QPen(colour, 1, Qt::DashDotLine));
    line->point1->setCoords(x, 0);
    line->point2->setCoords(x, 1);
    items.items.push_back(line);
    auto* text = new QCPItemText(plots_[p]);
    text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(x, 0.02);  // layOutMarkerLabels picks the row and side
    text->setText(" " + label);
    text->setColor(colour);
    QColor backing = palette().color(QPalette::Base);  // readable over the curves
    backing.setAlpha(200);
    text->setBrush(backing);
    text->setFont(QFont(font().family(), 8));
    text->setClipToAxisRect(true);
    items.items.push_back(text);
  }
  markerItems_.push_back(items);
  latest_ = std::max(latest_, x);
  dirty_ = true;
}

void TelemetryPlots::addTrial(double unixTime, const QString& label, double samplesPerS) {
  if (origin_ < 0) origin_ = unixTime;
  if (!trialGraph_) {
    trialGraph_ = plots_[Throughput]->addGraph();
    trialGraph_->setLineStyle(QCPGraph::lsNone);
    const QColor colour = palette().color(QPalette::Highlight);
    trialGraph_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, colour, colour, 8));
    trialGraph_->setName(tr("measured settings"));
    plots_[Throughput]->legend->setVisible(true);
  }
  if (std::isfinite(samplesPerS) && samplesPerS > 0) trialGraph_->addData(unixTime - origin_, samplesPerS);
  addMarker(unixTime, label);
}

bool TelemetryPlots::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::Resize)
    if (auto* plot = qobject_cast<QCustomPlot*>(watched))
      if (auto* title = qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0))) {
        const int p = static_cast<int>(std::find(std::begin(plots_), std::end(plots_), plot) - std::begin(plots_));
        if (p >= PlotCount) return QWidget::eventFilter(watched, event);
        const QString line = tr(kPlots[p].title);
        // Cut at the first ": " (what is plotted, then how): centred, both halves stay whole.
        const QString split = QString(line).replace(line.indexOf(": "), 2, ":\n");
        const bool fits = QFontMetrics(title->font()).horizontalAdvance(line) + 8 <= plot->width();
        title->setText(fits ? line : split);
      }
  return QWidget::eventFilter(watched, event);
}

QString TelemetryPlots::titleText(Plot plot) const {
  const auto* title = qobject_cast<QCPTextElement*>(plots_[plot]->plotLayout()->element(0, 0));
  return title ? title->text() : QString();
}

QString TelemetryPlots::titleOverflow(Plot plot) const {
  const auto* title = qobject_cast<QCPTextElement*>(plots_[plot]->plotLayout()->element(0, 0));
  if (!title) return {};
  const QFontMetrics metrics(title->font());
  for (const QString& line : title->text().split('\n'))
    if (metrics.horizontalAdvance(line) + 8 > plots_[plot]->width())
      return QString("plot title line \"%1\" is %2 px, its plot %3 px")
          .arg(line)
          .arg(metrics.horizontalAdvance(line))
          .arg(plots_[plot]->width());
  return {};
}

QList<QPointF> TelemetryPlots::trialPoints() const {
  QList<QPointF> out;
  if (trialGraph_)
    for (auto d = trialGraph_->data()->constBegin(); d != trialGraph_->data()->constEnd(); ++d) out.push_back({d->key, d->value});
  return out;
}

QCPGraph* TelemetryPlots::graph(const Series& s, Plot plot, int g) const {
  if (g < 0 || g >= kPlots[plot].graphsPerSeries || s.graphs.empty()) return nullptr;
  int index = g;
  for (int p = 0; p < plot; ++p) index += kPlots[p].graphsPerSeries;
  return s.graphs[static_cast<std::size_t>(index)];
}

QList<QPointF> TelemetryPlots::points(const QString& label, Plot plot, int g) const {
  QList<QPointF> out;
  auto it = series_.find(label);
  if (it == series_.end()) return out;
  if (const QCPGraph* gr = graph(*it, plot, g))
    for (auto d = gr->data()->constBegin(); d != gr->data()->constEnd(); ++d) out.push_back({d->key, d->value});
  return out;
}

void TelemetryPlots::clear() {
  for (auto& m : markerItems_)
    for (auto* item : m.items) item->parentPlot()->removeItem(item);
  markerItems_.clear();
  markers_.clear();
  for (auto* text : noData_) text->setVisible(false);
  trialGraph_ = nullptr;
  for (int p = 0; p < PlotCount; ++p) {
    plots_[p]->clearGraphs();
    addClipGraph(p);
    clipNote_[p]->setVisible(false);
    plots_[p]->legend->setVisible(false);
    plots_[p]->replot();
  }
  series_.clear();
  seriesOrder_.clear();
  latestByLabel_.clear();
  namer_.clear();
  aggregated_ = false;
  bucketEnd_ = -1;
  origin_ = -1;
  latest_ = 0;
  dirty_ = false;
}

int TelemetryPlots::pointCount(const QString& label, Plot plot) const {
  auto it = series_.find(label);
  if (it == series_.end()) return 0;
  const QCPGraph* g = graph(*it, plot, 0);
  return g ? g->dataCount() : 0;
}

double TelemetryPlots::axisUpper(Plot plot, bool right) const {
  return (right ? plots_[plot]->yAxis2 : plots_[plot]->yAxis)->range().upper;
}

QString TelemetryPlots::axisLabel(Plot plot, bool right) const {
  return (right ? plots_[plot]->yAxis2 : plots_[plot]->yAxis)->label();
}

bool TelemetryPlots::onRightAxis(Plot plot, int graph) const { return graph == kPlots[plot].rightGraph; }

double TelemetryPlots::lastValue(const QString& label, Plot plot, int graph) const {
  auto it = series_.find(label);
  if (it == series_.end()) return qQNaN();
  const QCPGraph* g = this->graph(*it, plot, graph);
  return g && g->dataCount() ? (g->data()->constEnd() - 1)->value : qQNaN();
}

// What is never clipped: the measured settings (a sweep's best may lie far above the rest) and
// the last kRecentSeconds of every series (a real jump shows at once, before it fills 5 % of
// the window and moves the percentile).
double TelemetryPlots::robustTop(int p, QCPAxis* axis, double from) {
  QCustomPlot* plot = plots_[p];
  const double recent = latest_ - kRecentSeconds;
  std::vector<double> values;
  double kept = 0;  // the largest value that is never clipped
  for (int g = 0; g < plot->graphCount(); ++g) {
    QCPGraph* graph = plot->graph(g);
    if (graph == clipGraph_[p] || graph->valueAxis() != axis) continue;
    for (auto d = graph->data()->findBegin(from, false); d != graph->data()->constEnd(); ++d) {
      if (!std::isfinite(d->value)) continue;
      if (graph == trialGraph_ || d->key >= recent) kept = std::max(kept, d->value);
      else values.push_back(d->value);
    }
  }
  if (values.empty()) return kept;
  auto at = values.begin() + static_cast<std::ptrdiff_t>(kClipQuantile * static_cast<double>(values.size() - 1) + 0.5);
  std::nth_element(values.begin(), at, values.end());
  const double q = *at;
  const double limit = q > 0 ? kClipFactor * q : *std::max_element(values.begin(), values.end());
  double top = kept;
  for (double v : values)
    if (v <= limit) top = std::max(top, v);
  if (top >= *std::max_element(values.begin(), values.end())) return top;  // nothing lies above
  // Mark what lies above (left axis: the note's figure is in its unit): a triangle on the top
  // edge at its time, and a note with the largest.
  for (int g = 0; g < plot->graphCount(); ++g) {
    QCPGraph* graph = plot->graph(g);
    if (graph == clipGraph_[p] || graph == trialGraph_ || graph->valueAxis() != axis) continue;
    for (auto d = graph->data()->findBegin(from, false); d != graph->data()->constEnd() && d->key < recent; ++d)
      if (std::isfinite(d->value) && d->value > top && axis == plot->yAxis) {
        clipGraph_[p]->addData(d->key, 0);  // placed on the edge once the range is set
        clippedMax_[p] = clipped_[p]++ ? std::max(clippedMax_[p], d->value) : d->value;
      }
  }
  return top;
}

// Series heard from in the last kStaleSeconds: a job that ended does not push the plots into
// the aggregate view when another starts.
int TelemetryPlots::liveSeries() const {
  int live = 0;
  for (const auto& l : latestByLabel_) live += latest_ - l.x <= kStaleSeconds;
  return live;
}

int TelemetryPlots::clippedPoints(Plot plot) const { return clipped_[plot]; }

int TelemetryPlots::pointCount(Plot p) const {
  int n = 0;
  for (int g = 0; g < plots_[p]->graphCount(); ++g) n += plots_[p]->graph(g)->data()->size();
  return n;
}

void TelemetryPlots::redraw() {
  if (!dirty_) return;
  const double from = latest_ - windowSeconds_;
  // What scrolled out of the window goes whether or not the plots are shown: hidden (another tab,
  // the heat map past 8 series) they grew by every record for hours, and the first redraw after
  // freed millions of points at once.
  while (!markers_.isEmpty() && markers_.front().x < from) {
    for (auto* item : markerItems_.front().items) item->parentPlot()->removeItem(item);
    markerItems_.erase(markerItems_.begin());
    markers_.pop_front();
  }
  for (QCustomPlot* plot : plots_)
    for (int g = 0; g < plot->graphCount(); ++g) plot->graph(g)->data()->removeBefore(from);
  if (!isVisible()) return;  // still dirty: drawn once shown
  dirty_ = false;
  const double left = std::max(0.0, from), right = std::max(latest_, 0.25);
  for (int p = 0; p < PlotCount; ++p) {
    QCustomPlot* plot = plots_[p];
    bool anyValue = false;
    for (int g = 0; g < plot->graphCount(); ++g) {
      if (plot->graph(g) == clipGraph_[p]) continue;
      bool found = false;
      plot->graph(g)->getValueRange(found);
      anyValue = anyValue || found;
    }
    // A figure no publisher reports (a Python probe has no worker latency; a CPU run no device
    // memory) says so, instead of an empty frame that looks like a fault.
    noData_[p]->setVisible(!anyValue && plot->graphCount() > 0);
    plot->xAxis->setRange(left, right);
    clipped_[p] = 0;
    clipGraph_[p]->data()->clear();
    for (QCPAxis* axis : {plot->yAxis, plot->yAxis2}) {
      if (!axis->visible()) continue;
      const double top = robustTop(p, axis, from);
      axis->setRange(0, std::max(top * 1.1, 1.0));
    }
    for (auto d = clipGraph_[p]->data()->begin(); d != clipGraph_[p]->data()->end(); ++d)
      d->value = plot->yAxis->range().upper * 0.97;
    clipNote_[p]->setVisible(clipped_[p] > 0);
    if (clipped_[p] > 0)
      clipNote_[p]->setText(tr("▲ %n clipped, up to %1", nullptr, clipped_[p]).arg(QLocale().toString(clippedMax_[p], 'f', 0)));
    if (!anyValue) {  // nothing to scale to: a plain 0-1 frame under the note
      plot->yAxis->setRange(0, 1);
      plot->yAxis2->setRange(0, 1);
    }
    // The axes' tick labels set the plot's margins: lay the plot out with this frame's ranges
    // before placing the marker labels, or a label placed for the old width can fall off the edge.
    plot->plotLayout()->update(QCPLayoutElement::upPreparation);
    plot->plotLayout()->update(QCPLayoutElement::upMargins);
    plot->plotLayout()->update(QCPLayoutElement::upLayout);
    layOutMarkerLabels(p);
    plot->replot(QCustomPlot::rpQueuedReplot);
  }
  ++replots_;
}

bool TelemetryPlots::saysNotReported(Plot plot) const { return noData_[plot]->visible(); }

QRectF TelemetryPlots::plotArea(Plot plot) const { return plots_[plot]->axisRect()->rect(); }

QList<QPair<QString, QRectF>> TelemetryPlots::markerLabels(Plot plot) const {
  QList<QPair<QString, QRectF>> out;
  for (const auto& m : markerItems_)
    if (auto* text = qobject_cast<QCPItemText*>(m.items[static_cast<std::size_t>(2 * plot + 1)]); text && text->visible())
      out.push_back({text->text().trimmed(), QRectF(text->topLeft->pixelPosition(), text->bottomRight->pixelPosition())});
  return out;
}

// Labels never overlap nor leave the plot: newest first, each takes the first
// row (of up to three) where it fits, reading right of its line or else left;
// one that fits nowhere is hidden (its line stays, the log has the text).
void TelemetryPlots::layOutMarkerLabels(int p) {
  if (markers_.isEmpty()) return;
  QCustomPlot* plot = plots_[p];
  const QRect rect = plot->axisRect()->rect();
  if (rect.width() <= 0 || rect.height() <= 0) return;  // not laid out yet
  const QFontMetrics metrics(QFont(font().family(), 8));
  const int lineHeight = metrics.height();
  const int rows = std::clamp(rect.height() / 2 / lineHeight, 1, 3);
  std::vector<std::vector<std::pair<double, double>>> taken(static_cast<std::size_t>(rows));
  for (int m = static_cast<int>(markers_.size()) - 1; m >= 0; --m) {
    auto* text = qobject_cast<QCPItemText*>(markerItems_[static_cast<std::size_t>(m)].items[static_cast<std::size_t>(2 * p + 1)]);
    if (!text) continue;
    const QString& label = markers_[m].label;
    const double at = plot->xAxis->coordToPixel(markers_[m].x);
    const double width = metrics.horizontalAdvance(label) + 2 * metrics.averageCharWidth();
    bool placed = false;
    for (int r = 0; r < rows && !placed; ++r)
      for (bool toRight : {true, false}) {
        const double a = toRight ? at : at - width, b = toRight ? at + width : at;
        if (a < rect.left() || b > rect.right()) continue;
        bool free = true;
        for (const auto& [x0, x1] : taken[static_cast<std::size_t>(r)]) free = free && (b <= x0 || a >= x1);
        if (!free) continue;
        taken[static_cast<std::size_t>(r)].push_back({a, b});
        text->setPositionAlignment((toRight ? Qt::AlignLeft : Qt::AlignRight) | Qt::AlignTop);
        text->setText(toRight ? " " + label : label + " ");
        text->position->setCoords(markers_[m].x, (2.0 + r * lineHeight) / rect.height());
        placed = true;
        break;
      }
    text->setVisible(placed);
  }
}

void TelemetryPlots::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) applyPalette();
  QWidget::changeEvent(event);
}

void TelemetryPlots::applyPalette() {
  // QCustomPlot paints its own white background; follow the window palette so
  // the plots read in dark themes too.
  const QPalette pal = palette();
  const QColor text = pal.color(QPalette::Text), base = pal.color(QPalette::Base);
  const QColor gridColour = pal.color(QPalette::Mid);
  for (auto* plot : plots_) {
    plot->setBackground(base);
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis, plot->yAxis2}) {
      axis->setBasePen(QPen(text));
      axis->setTickPen(QPen(text));
      axis->setSubTickPen(QPen(text));
      axis->setTickLabelColor(text);
      axis->setLabelColor(text);
      axis->grid()->setPen(QPen(gridColour, 0, Qt::DotLine));
    }
    // The legend is a row of its own under the plot (Throughput's): no box around it.
    plot->legend->setBrush(Qt::NoBrush);
    plot->legend->setTextColor(text);
    plot->legend->setBorderPen(Qt::NoPen);
    if (auto* title = qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0))) title->setTextColor(text);
    plot->replot(QCustomPlot::rpQueuedReplot);
  }
}

}  // namespace stoker
