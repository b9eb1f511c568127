// stage_breakdown_view: "which stage starves my GPU" -- one stacked horizontal bar per device (or
// rank) of the workers' mean milliseconds per batch by stage (read, decode, transform, collate,
// copy: telemetry's stages_ms) with the consumer's data wait as a bar of its own beside it, and
// the dominant stage named in words under the plot ("cuda:0 decode-bound: 71 % of worker time in
// JPEG/PNG decode"). Fed the same telemetry records as the live plots; keeps the latest record
// of each series.
#pragma once

#include <QMap>
#include <QString>
#include <QWidget>
#include <vector>

#include "series_namer.h"
#include "telemetry/telemetry_record.h"

class QCustomPlot;
class QCPBars;
class QLabel;

namespace stoker {

class StageBreakdownView : public QWidget {
  Q_OBJECT
 public:
  explicit StageBreakdownView(QWidget* parent = nullptr);
  // Series are "cpu", or "rank 1 cuda:0" with labelByRank.
  void setLabelByRank(bool byRank) { labelByRank_ = byRank; }
  // A remote dataset's read stage is its time waiting on the network: the legend says so.
  void setReadIsNetwork(bool network);
  QString stageLegend(int stage) const;  // the legend text of kTelemetryStages[stage]
  void addRecords(const std::vector<TelemetryRecord>& records);
  void clear();

  // What it shows (tests read these): the series in bar order, a stage's ms of one series, and
  // the verdict lines.
  QStringList series() const { return order_; }
  double stageMs(const QString& series, const QString& stage) const;  // NaN when not reported
  QString verdictText() const;
  QCustomPlot* plot() const { return plot_; }
  // Where the plot drew, in its own pixels: the bars' area and the legend's, and whether every
  // legend entry got its whole width (none clipped).
  QRect barsArea() const;
  QRect legendArea() const;
  bool legendEntriesWhole() const;

 private:
  void redraw();
  QCustomPlot* plot_;
  QLabel* verdict_;
  std::vector<QCPBars*> bars_;  // one per kTelemetryStages entry, stacked, then the wait bar
  QMap<QString, TelemetryRecord> latest_;
  QStringList order_;
  bool labelByRank_ = false;
  SeriesNamer namer_;  // labelByRank: two jobs on one rank and device are two bars
};

}  // namespace stoker
