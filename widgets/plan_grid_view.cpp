#include "plan_grid_view.h"

#include <QImage>
#include <QPainter>

#include <cmath>

#include <algorithm>

namespace stoker {

PlanGridView::PlanGridView(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void PlanGridView::setGrid(const PlanGrid& grid) {
  grid_ = grid;
  update();
}

QColor PlanGridView::rankColor(int rank) {
  // Golden-angle hues: neighbouring ranks never look alike, any rank count.
  return QColor::fromHsv((rank * 137) % 360, 150, 215);
}

void PlanGridView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  const int ranks = static_cast<int>(grid_.stepSizes.size());
  const int labelW = 56, captionH = grid_.caption.isEmpty() ? 0 : fontMetrics().height() + 4;
  p.setPen(palette().text().color());
  if (captionH) p.drawText(QRect(4, 0, width() - 8, captionH), Qt::AlignLeft | Qt::AlignVCenter, grid_.caption);
  if (ranks == 0) return;  // the caption says why
  int steps = 0;
  qint64 largest = 1;
  for (const auto& row : grid_.stepSizes) {
    steps = std::max(steps, static_cast<int>(row.size()));
    for (auto v : row) largest = std::max(largest, v);
  }
  const QRect area(labelW, captionH, std::max(1, width() - labelW - 4), std::max(1, height() - captionH - 2));
  // More steps than pixels: each column shows a bin of steps (their mean size).
  const int columns = std::max(1, std::min(steps, area.width() / 3));
  const double perColumn = static_cast<double>(std::max(steps, 1)) / columns;
  // One pixel per (rank, column), scaled up: a 1024-rank plan paints as
  // fast as a 4-rank one (cell-by-cell drawing took >100 ms there).
  QImage cells(columns, ranks, QImage::Format_ARGB32_Premultiplied);
  cells.fill(Qt::transparent);
  for (int r = 0; r < ranks; ++r) {
    const auto& row = grid_.stepSizes[r];
    auto* line = reinterpret_cast<QRgb*>(cells.scanLine(r));
    const QColor base = rankColor(r);
    for (int c = 0; c < columns; ++c) {
      const int from = static_cast<int>(c * perColumn), to = std::max(from + 1, static_cast<int>((c + 1) * perColumn));
      qint64 sum = 0;
      int n = 0;
      for (int s = from; s < to && s < row.size(); ++s) sum += row[s], ++n;
      if (n == 0) continue;
      QColor color = base;
      color.setAlphaF(0.25 + 0.75 * static_cast<double>(sum) / n / largest);
      line[c] = qPremultiply(color.rgba());
    }
  }
  p.drawImage(area, cells);
  const double cellW = static_cast<double>(area.width()) / columns;
  const double cellH = static_cast<double>(area.height()) / ranks;
  const int labelEvery = std::max(1, static_cast<int>(fontMetrics().height() / std::max(cellH, 0.01)) + 1);
  if (cellW > 4 && cellH > 4) {  // grid lines only where cells are big enough to separate
    p.setPen(QPen(palette().base().color(), 1));
    for (int c = 1; c < columns; ++c) p.drawLine(QPointF(area.left() + c * cellW, area.top()), QPointF(area.left() + c * cellW, area.bottom()));
    for (int r = 1; r < ranks; ++r) p.drawLine(QPointF(area.left(), area.top() + r * cellH), QPointF(area.right(), area.top() + r * cellH));
  }
  if (grid_.markStep >= 0) {
    const double x = area.left() + grid_.markStep / perColumn * cellW;
    p.setPen(QPen(palette().text().color(), 2, Qt::DashLine));
    p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
  }
  p.setPen(palette().text().color());
  for (int r = 0; r < ranks; ++r) {
    const double y = area.top() + r * cellH;
    if (r % labelEvery == 0)
      p.drawText(QRectF(0, y, labelW - 4, std::max(cellH, static_cast<double>(fontMetrics().height()))),
                 Qt::AlignRight | Qt::AlignTop, tr("rank %1").arg(r));
    const int pad = grid_.paddingFrom.value(r, -1);
    if (pad >= 0) {  // padding: hatch the rank's row from its first padded step on
      const double x = area.left() + std::floor(pad / perColumn) * cellW;
      p.fillRect(QRectF(x, y, area.right() - x, std::max(cellH, 1.0)), QBrush(palette().text().color(), Qt::BDiagPattern));
    }
  }
}

}  // namespace stoker
