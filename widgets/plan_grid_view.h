// plan_grid_view: draws a shard plan as a grid -- one row per rank, one
// column per step, each cell coloured by rank and shaded by how many
// samples the rank takes in that step; cells holding padding (repeated
// samples) are hatched. Wide plans are binned so every step stays visible.
// A step axis runs under the grid, and hovering a cell says which rank and
// step it is, how many samples it holds and the first of their indices.
#pragma once

#include <QVector>
#include <QWidget>

namespace stoker {

struct PlanGrid {
  static constexpr int kIndicesPerCell = 4;
  // stepSizes[r][s]: samples rank r takes in step s; paddingFrom[r]: the
  // step from which rank r's samples include padding (-1: none).
  QVector<QVector<qint64>> stepSizes;
  QVector<int> paddingFrom;
  QString caption;
  int markStep = -1;  // a dashed line before this step (where a resume starts)
  // firstIndices[r][s * kIndicesPerCell + k]: the k-th sample index rank r takes in step s (-1:
  // none); empty when the plan was too big to keep them.
  QVector<QVector<qint64>> firstIndices;
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
  // What the tooltip says at `pos` (widget coordinates); empty outside the cells.
  QString cellText(const QPoint& pos) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  // Where the cells are drawn, and how many steps each column bins.
  struct Layout {
    QRect area;
    int ranks = 0, steps = 0, columns = 1;
    double perColumn = 1;
  };
  Layout layout() const;

  PlanGrid grid_;
};

}  // namespace stoker
