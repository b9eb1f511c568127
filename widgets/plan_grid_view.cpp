#include "plan_grid_view.h"

#include <QHelpEvent>
#include <QImage>
#include <QLocale>
#include <QPainter>
#include <QToolTip>

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

PlanGridView::Layout PlanGridView::layout() const {
  Layout l;
  l.ranks = static_cast<int>(grid_.stepSizes.size());
  for (const auto& row : grid_.stepSizes) l.steps = std::max(l.steps, static_cast<int>(row.size()));
  const int labelW = 56, captionH = grid_.caption.isEmpty() ? 0 : fontMetrics().height() + 4;
  const int axisH = fontMetrics().height() + 6;  // the step axis under the cells
  l.area = QRect(labelW, captionH, std::max(1, width() - labelW - 8), std::max(1, height() - captionH - axisH - 2));
  // More steps than pixels: each column shows a bin of steps (their mean size).
  l.columns = std::max(1, std::min(l.steps, l.area.width() / 3));
  l.perColumn = static_cast<double>(std::max(l.steps, 1)) / l.columns;
  return l;
}

QString PlanGridView::cellText(const QPoint& pos) const {
  const Layout l = layout();
  if (l.ranks == 0 || !l.area.contains(pos)) return {};
  const int r = std::clamp(static_cast<int>((pos.y() - l.area.top()) * l.ranks / std::max(1, l.area.height())), 0, l.ranks - 1);
  const int c = std::clamp(static_cast<int>((pos.x() - l.area.left()) * l.columns / std::max(1, l.area.width())), 0, l.columns - 1);
  const int from = static_cast<int>(c * l.perColumn), to = std::max(from + 1, static_cast<int>((c + 1) * l.perColumn));
  const auto& row = grid_.stepSizes[r];
  if (from >= row.size()) return tr("rank %1: no step %2 (its last step is %3)").arg(r).arg(from).arg(row.size() - 1);
  qint64 before = 0, in = 0;
  for (int s = 0; s < from; ++s) before += row[s];
  for (int s = from; s < to && s < row.size(); ++s) in += row[s];
  const QLocale loc;
  QString text = to - from == 1 ? tr("rank %1, step %2: %3 samples").arg(r).arg(from).arg(loc.toString(in))
                                : tr("rank %1, steps %2–%3: %4 samples").arg(r).arg(from).arg(std::min<int>(to, row.size()) - 1)
                                      .arg(loc.toString(in));
  if (in > 0)
    text += tr("\npositions %1–%2 of the rank's list").arg(loc.toString(before)).arg(loc.toString(before + in - 1));
  const auto& first = grid_.firstIndices.value(r);
  if (first.size() >= (from + 1) * PlanGrid::kIndicesPerCell) {
    QStringList idx;
    for (int k = 0; k < PlanGrid::kIndicesPerCell; ++k)
      if (first[from * PlanGrid::kIndicesPerCell + k] >= 0) idx << QString::number(first[from * PlanGrid::kIndicesPerCell + k]);
    if (!idx.isEmpty())
      text += tr("\nsample indices (step %1): %2%3").arg(from).arg(idx.join(", ")).arg(row[from] > idx.size() ? ", …" : "");
  }
  const int pad = grid_.paddingFrom.value(r, -1);
  if (pad >= 0 && to - 1 >= pad) text += tr("\nincludes padding (samples repeated to keep ranks equal)");
  return text;
}

bool PlanGridView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const QString text = cellText(help->pos());
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

void PlanGridView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  const int captionH = grid_.caption.isEmpty() ? 0 : fontMetrics().height() + 4;
  const int labelW = 56;
  p.setPen(palette().text().color());
  if (captionH) p.drawText(QRect(4, 0, width() - 8, captionH), Qt::AlignLeft | Qt::AlignVCenter, grid_.caption);
  const Layout l = layout();
  const int ranks = l.ranks, steps = l.steps, columns = l.columns;
  if (ranks == 0) return;  // the caption says why
  qint64 largest = 1;
  for (const auto& row : grid_.stepSizes)
    for (auto v : row) largest = std::max(largest, v);
  const QRect area = l.area;
  const double perColumn = l.perColumn;
  // One pixel per (rank, column), scaled up: a 1024-rank plan paints as
  // fast as a 4-rank one (cell-by-cell drawing took >100 ms there).
  QImage cells(columns, ranks, QImage::Format_ARGB32_Premultiplied);
  cells.fill(Qt::transparent);
  // The pixels in integer arithmetic: a QColor per cell (setAlphaF, rgba, qPremultiply) took
  // 18 ms for a 1,024-rank grid and 12 ms for its resume preview, painted together -- past the
  // 50 ms stall budget in a loaded CI run.
  const double perMean = 0.75 * 255 / static_cast<double>(largest);
  for (int r = 0; r < ranks; ++r) {
    const auto& row = grid_.stepSizes[r];
    auto* line = reinterpret_cast<QRgb*>(cells.scanLine(r));
    const QRgb base = rankColor(r).rgb();
    const int red = qRed(base), green = qGreen(base), blue = qBlue(base);
    for (int c = 0; c < columns; ++c) {
      const int from = static_cast<int>(c * perColumn), to = std::max(from + 1, static_cast<int>((c + 1) * perColumn));
      qint64 sum = 0;
      int n = 0;
      for (int s = from; s < to && s < row.size(); ++s) sum += row[s], ++n;
      if (n == 0) continue;
      const int alpha = static_cast<int>(0.25 * 255 + 0.5 + perMean * static_cast<double>(sum) / n);  // 25-100 % by size
      line[c] = qRgba((red * alpha + 127) / 255, (green * alpha + 127) / 255, (blue * alpha + 127) / 255, alpha);  // premultiplied
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
  // The step axis: ticks at round step numbers, as many as fit.
  const int axisY = area.bottom() + 2;
  p.setPen(palette().text().color());
  p.drawLine(area.left(), axisY, area.right(), axisY);
  const int labelPx = fontMetrics().horizontalAdvance(QString::number(std::max(steps, 1) * 10)) + 12;
  const double pxPerStep = static_cast<double>(area.width()) / std::max(steps, 1);
  double every = 1;
  for (int i = 0; every * pxPerStep < labelPx; ++i)  // 1, 2, 5, 10, 20, 50, ... steps between labels
    every = (i % 3 == 0 ? 2 : i % 3 == 1 ? 5 : 10) * std::pow(10.0, i / 3);
  for (double s = 0; s < steps; s += every) {
    const double x = area.left() + (s + 0.5) * pxPerStep;
    p.drawLine(QPointF(x, axisY), QPointF(x, axisY + 3));
    p.drawText(QRectF(x - labelPx / 2.0, axisY + 3, labelPx, fontMetrics().height()), Qt::AlignHCenter | Qt::AlignTop,
               QString::number(static_cast<qint64>(s)));
  }
  p.drawText(QRectF(0, axisY + 3, labelW - 4, fontMetrics().height()), Qt::AlignRight | Qt::AlignTop, tr("step"));
}

}  // namespace stoker
