// rank_heat_map: ranks x time, coloured by one figure -- the Monitor's view of
// a job with many ranks, where a line per rank is unreadable. A row per rank
// (0 at the top), a column per second of record time over the last
// windowSeconds; a cell holds the mean of that rank's reports in that second.
// Figures: the data-wait share (green fine, amber moderate, red input-bound,
// on the classification's own thresholds) or samples/s. Cells without a
// report stay empty, never 0. Ranks 0-4095 get rows; with more ranks than
// pixel rows, a drawn row shows the worst of the ranks it stands for.
#pragma once

#include <QWidget>
#include <map>
#include <vector>

#include "telemetry/telemetry_record.h"

class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QTimer;

namespace stoker {

class RankHeatMap : public QWidget {
  Q_OBJECT
 public:
  enum Figure { WaitShare, SamplesPerSecond };

  explicit RankHeatMap(QWidget* parent = nullptr);
  void addRecords(const std::vector<TelemetryRecord>& records);
  void setFigure(Figure f);
  Figure figure() const { return figure_; }
  void setWindowSeconds(int seconds) { windowSeconds_ = seconds; }
  void clear();

  // What it shows (tests): the ranks it has rows for, and one cell's value (NaN when empty).
  int rankCount() const { return static_cast<int>(cells_.size()); }
  double cell(int rank, double unixTime) const;
  QCustomPlot* plot() const { return plot_; }
  // Ranks per drawn row: 1, or more when there are more ranks than pixel rows (the row shows the
  // worst of them: the highest wait share, the lowest rate).
  int ranksPerRow() const { return group_; }
  // The value drawn where `rank` and `unixTime` fall (NaN when empty), as of the last redraw.
  double shownValue(int rank, double unixTime) const;
  // Renders the map as a PNG of that size, shown or not (the Monitor's export).
  bool savePng(const QString& path, int width, int height);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void redraw(bool evenIfHidden = false);

  struct Cell {
    double share = 0, rate = 0;
    int shareCount = 0, rateCount = 0;
  };
  QCustomPlot* plot_;
  QCPColorMap* map_;
  QCPColorScale* scale_;
  QTimer* timer_;
  std::map<int, std::map<long long, Cell>> cells_;  // rank -> second -> figures
  long long latestSecond_ = 0;
  int windowSeconds_ = 120;
  Figure figure_ = WaitShare;
  bool dirty_ = false;
  int group_ = 1;
  int pixelRows_ = 0;  // the axis height the rows were last grouped for
  long long firstSecond_ = 0;  // the drawn map's first column
};

}  // namespace stoker
