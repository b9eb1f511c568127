// plan_grid_view: draws a shard plan as a grid -- one row per rank, one
// column per step, each cell coloured by rank and shaded by how many
// samples the rank takes in that step; cells holding padding (repeated
// samples) are hatched. Wide plans are binned so every step stays visible.
#pragma once

#include <QVector>
#include <QWidget>

namespace stoker {

struct PlanGrid {
  // stepSizes[r][s]: samples rank r takes in step s; paddingFrom[r]: the
  // step from which rank r's samples include padding (-1: none).
  QVector<QVector<qint64>> stepSizes;
  QVector<int> paddingFrom;
  QString caption;
  int markStep = -1;  // a dashed line before this step (where a resume starts)
};

class PlanGridView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanGridView(QWidget* parent = nullptr);
  void setGrid(const PlanGrid& grid);
  const PlanGrid& grid() const { return grid_; }
  // The colour of rank r, shared with the per-rank table.
  static QColor rankColor(int rank);
  QSize minimumSizeHint() const override { return {240, 90}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  PlanGrid grid_;
};

}  // namespace stoker
