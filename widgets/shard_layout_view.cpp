#include "shard_layout_view.h"

#include <QLocale>
#include <QPainter>

#include <algorithm>

#include "plan_grid_view.h"

namespace stoker {

ShardLayoutView::ShardLayoutView(QWidget* parent) : QWidget(parent) { setMinimumHeight(150); }

void ShardLayoutView::setLayout(const ShardLayout& layout) {
  layout_ = layout;
  update();
}

void ShardLayoutView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  p.setPen(palette().color(QPalette::Text));
  const int lineH = fontMetrics().height();
  if (layout_.tensor.isEmpty() || layout_.extent <= 0) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a tensor to see how its bytes are split"));
    return;
  }
  p.drawText(QRect(8, 4, width() - 16, lineH), Qt::AlignLeft, QString("%1 — %2").arg(layout_.tensor, layout_.dimLabel));
  // The titles' column is as wide as its longest title ("hf:1000000B" was cut at 70 px), up to a
  // third of the view; beyond that a title is elided in the middle.
  const QString targetTitle = layout_.targetTitle.isEmpty() ? tr("target") : layout_.targetTitle;
  const int titleW = std::max(fontMetrics().horizontalAdvance(tr("source")), fontMetrics().horizontalAdvance(targetTitle));
  const int labelW = std::clamp(titleW + 10, 70, std::max(70, width() / 3)), left = 8 + labelW;
  const int barW = std::max(40, width() - left - 12);
  const int barH = std::max(28, (height() - 3 * lineH - 24) / 2);
  auto drawBar = [&](int y, const QString& title, const QVector<LayoutSegment>& segments) {
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(8, y, labelW - 4, barH), Qt::AlignVCenter | Qt::AlignLeft,
               fontMetrics().elidedText(title, Qt::ElideMiddle, labelW - 4));
    if (segments.isEmpty()) {
      p.drawText(QRect(left, y, barW, barH), Qt::AlignCenter, tr("(dry-run a target to see it)"));
      p.drawRect(QRect(left, y, barW, barH));
      return;
    }
    const bool grid = layout_.extent2 > 0;
    auto scale = [](qint64 v, qint64 extent, int pixels) {
      return static_cast<int>(static_cast<double>(v) * pixels / static_cast<double>(extent));
    };
    for (const auto& s : segments) {
      QRect r;
      QString text;
      if (grid) {  // rows down, columns across
        const int x0 = left + scale(s.start2, layout_.extent2, barW), x1 = left + scale(s.start2 + s.length2, layout_.extent2, barW);
        const int y0 = y + scale(s.start, layout_.extent, barH), y1 = y + scale(s.start + s.length, layout_.extent, barH);
        r = QRect(x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0));
        text = QString("%1 [%2:%3, %4:%5]").arg(s.label).arg(s.start).arg(s.start + s.length).arg(s.start2).arg(s.start2 + s.length2);
      } else {
        const int x0 = left + scale(s.start, layout_.extent, barW), x1 = left + scale(s.start + s.length, layout_.extent, barW);
        r = QRect(x0, y, std::max(1, x1 - x0), barH);
        text = QString("%1\n%2–%3").arg(s.label).arg(s.start).arg(s.start + s.length);
      }
      p.fillRect(r, PlanGridView::rankColor(s.colour));
      p.setPen(QColor(40, 40, 40));
      p.drawRect(r.adjusted(0, 0, -1, -1));
      const int textW = p.fontMetrics().horizontalAdvance(grid ? text : s.label);
      if (textW < r.width() - 4 && (!grid || r.height() > p.fontMetrics().height()))
        p.drawText(r, Qt::AlignCenter, text);
      else if (grid && p.fontMetrics().horizontalAdvance(s.label) < r.width() - 4 && r.height() > p.fontMetrics().height())
        p.drawText(r, Qt::AlignCenter, s.label);
    }
  };
  const int y0 = 8 + lineH;
  drawBar(y0, tr("source"), layout_.source);
  drawBar(y0 + barH + 10, targetTitle, layout_.target);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRect(left, y0 + 2 * barH + 14, barW, lineH), Qt::AlignLeft, "0");
  p.drawText(QRect(left, y0 + 2 * barH + 14, barW, lineH), Qt::AlignRight,
             QLocale().toString(layout_.extent2 > 0 ? layout_.extent2 : layout_.extent));
}

}  // namespace stoker
