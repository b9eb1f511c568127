// telemetry_plots: the live per-device plots the Loader and Monitor share --
// throughput (samples/s, MB/s dashed), memory (used, reserved dashed; used as
// a % of the device's total dotted, on the right axis), prefetch depth (ready batches dashed) and batch latency (p50, p99
// dashed). Throughput carries a band: p10-p90 of the series' last 10 reports.
// Markers (a labelled vertical line on every plot) show when a setting
// changed during the run. Past a number of series (setAggregateAbove: the
// Monitor's many ranks), a line each is unreadable: the plots then draw the
// median across series with a min-max band, from the latest value of each
// series, in buckets of record time (so a replayed session draws the same). Records are added in batches; the plots redraw from a 25 Hz timer
// only when something changed, and keep a bounded window of seconds
// (QCustomPlot practice: addData in batches, removeBefore, queued replots).
#pragma once

#include <QHash>
#include <QList>
#include <QPair>
#include <QPointF>
#include <QRectF>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "series_namer.h"
#include "telemetry/telemetry_record.h"

class QCustomPlot;
class QCPGraph;
class QCPAbstractItem;
class QCPAxis;
class QCPItemText;
class QTimer;

namespace stoker {

class TelemetryPlots : public QWidget {
  Q_OBJECT
 public:
  bool eventFilter(QObject* watched, QEvent* event) override;
  enum Plot { Throughput, Memory, Prefetch, Latency, PlotCount };

  explicit TelemetryPlots(QWidget* parent = nullptr);

  // Series are named "sim:0" (by device), or "rank 1 cuda:0" with labelByRank.
  void setLabelByRank(bool byRank) { labelByRank_ = byRank; }
  void setWindowSeconds(double seconds) { windowSeconds_ = seconds; }
  // More series than this: min/median/max across them instead of a line each (0: never).
  void setAggregateAbove(int maxSeries) { aggregateAbove_ = maxSeries; }
  bool aggregated() const { return aggregated_; }
  // In aggregate mode, the points of the median (graph 0), min (1) or max (2) of a plot.
  QList<QPointF> aggregatePoints(Plot plot, int graph) const;
  double windowSeconds() const { return windowSeconds_; }
  // Epoch-end records are plotted too: they report the epoch's last window,
  // so a run of short epochs still draws points.
  void addRecords(const std::vector<TelemetryRecord>& records);
  // A labelled vertical line at `unixTime` (the records' clock) on every plot.
  void addMarker(double unixTime, const QString& label);
  // A setting measured by a sweep or the auto-tuner (which publish no telemetry while they
  // measure): its rate as a diamond on the throughput plot, and a marker with its label.
  void addTrial(double unixTime, const QString& label, double samplesPerS);
  QList<QPointF> trialPoints() const;
  // A plot's title as drawn now: on one line, or on two ("Throughput:\nsamples/s …") when the
  // plot is narrower than the line.
  QString titleText(Plot plot) const;
  // Empty when every line of that title fits the plot's width, else what sticks out.
  QString titleOverflow(Plot plot) const;
  void clear();
  struct Marker {
    double x = 0;  // seconds since the first record, like the points
    QString label;
  };
  QList<Marker> markers() const { return markers_; }
  // The points of one graph of a series (x = seconds since the first record).
  QList<QPointF> points(const QString& series, Plot plot, int graph = 0) const;

  QStringList series() const { return seriesOrder_; }
  int pointCount(const QString& series, Plot plot) const;  // points of its main graph now
  // What the plots show (tests read these; the widgets' users see them):
  double axisUpper(Plot plot, bool right) const;  // the y axis range's top
  QString axisLabel(Plot plot, bool right) const;
  bool onRightAxis(Plot plot, int graph) const;   // graph: 0 main, 1 dashed, 2 dotted
  double lastValue(const QString& series, Plot plot, int graph) const;  // NaN when none
  bool saysNotReported(Plot plot) const;
  // Points above the plot's robust y range now (drawn as triangles on the top edge).
  int clippedPoints(Plot plot) const;  // the plot has series but none reports its figure
  int replots() const { return replots_; }
  // Points a plot holds over all its graphs (tests: what scrolled out of the window is gone).
  int pointCount(Plot p) const;
  QRectF plotArea(Plot plot) const;  // the axis rectangle, in pixels
  // The marker labels shown on a plot, with their boxes in pixels.
  QList<QPair<QString, QRectF>> markerLabels(Plot plot) const;
  QCustomPlot* plot(Plot p) const { return plots_[p]; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Series {
    std::vector<QCPGraph*> graphs;  // per plot: main, secondary[, tertiary / band]
    std::vector<double> recentRates;  // the last reports' samples/s, for the band
    double lastX = -1;    // the latest record's x
    double interval = 0;  // the usual time between its records (moving average)
  };
  struct MarkerItems {
    std::vector<QCPAbstractItem*> items;
  };
  QString seriesLabel(const TelemetryRecord& r, const QString& base);  // labelByRank: see SeriesNamer
  QCPGraph* graph(const Series& s, Plot plot, int g) const;
  Series& seriesFor(const QString& label);
  void redraw();
  // The top of axis' range over the window from `from`: the largest value not above
  // kClipFactor x the 95th percentile; the ones above go to the plot's clip graph.
  double robustTop(int plot, QCPAxis* axis, double from);
  void addClipGraph(int plot);
  int liveSeries() const;
  void aggregate();            // switch to min/median/max graphs
  void closeBucket(double x);  // one aggregate point per plot at x
  void layOutMarkerLabels(int plot);
  void applyPalette();

  QCustomPlot* plots_[PlotCount] = {};
  QCPItemText* noData_[PlotCount] = {};  // "not reported by these publishers"
  QCPItemText* clipNote_[PlotCount] = {};  // "▲ 1 clipped, up to 250,000"
  QCPGraph* clipGraph_[PlotCount] = {};
  QCPGraph* trialGraph_ = nullptr;  // addTrial's diamonds, made with the first
  int clipped_[PlotCount] = {};
  double clippedMax_[PlotCount] = {};
  QHash<QString, Series> series_;
  QStringList seriesOrder_;
  QList<Marker> markers_;
  std::vector<MarkerItems> markerItems_;  // per marker: line and label of each plot, in plot order
  QTimer* timer_;
  bool labelByRank_ = false;
  bool dirty_ = false;
  double windowSeconds_ = 60;
  double origin_ = -1;   // time of the first record: x = seconds since
  double latest_ = 0;
  int replots_ = 0;
  // Aggregate mode: each series' latest main values (one per plot) and when they came.
  struct Latest {
    double x = 0;
    double values[PlotCount] = {};
  };
  QHash<QString, Latest> latestByLabel_;
  SeriesNamer namer_;  // labelByRank: what tells series apart
  QCPGraph* aggregateGraphs_[PlotCount][3] = {};  // median, min, max
  int aggregateAbove_ = 0;
  bool aggregated_ = false;
  double bucketEnd_ = -1;
};

}  // namespace stoker
