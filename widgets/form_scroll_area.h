// form_scroll_area: a vertical scroll area for a form that must never be cut off at the side.
// It scrolls up and down only, and its minimum width is the form's own (plus the frame and the
// vertical bar), so a splitter or a small window stops where every label, field and button is
// still whole; wider, the form follows the area's width. (QScrollArea's own minimum ignores its
// widget, which let the Loader's form be squeezed under its buttons with no way to reach them.)
#pragma once

#include <QScrollArea>
#include <QEvent>
#include <QScrollBar>
#include <QStyle>

namespace stoker {

class FormScrollArea : public QScrollArea {
 public:
  explicit FormScrollArea(QWidget* form, QWidget* parent = nullptr) : QScrollArea(parent) {
    setWidget(form);
    setWidgetResizable(true);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setFrameShape(QFrame::NoFrame);
    form->installEventFilter(this);
  }

  // The form's minimum can grow later (a wider field, a longer label): ask the splitter again.
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (watched == widget() && event->type() == QEvent::LayoutRequest) updateGeometry();
    return QScrollArea::eventFilter(watched, event);
  }

  QSize minimumSizeHint() const override {
    const QSize base = QScrollArea::minimumSizeHint();
    if (!widget()) return base;
    const int bar = style()->pixelMetric(QStyle::PM_ScrollBarExtent, nullptr, verticalScrollBar());
    return {widget()->minimumSizeHint().width() + 2 * frameWidth() + bar, base.height()};
  }
  QSize sizeHint() const override {
    const QSize base = QScrollArea::sizeHint();
    if (!widget()) return base;
    const int bar = style()->pixelMetric(QStyle::PM_ScrollBarExtent, nullptr, verticalScrollBar());
    return {widget()->sizeHint().width() + 2 * frameWidth() + bar, base.height()};
  }
};

}  // namespace stoker
