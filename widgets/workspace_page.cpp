#include "workspace_page.h"

#include <QLabel>
#include <QVBoxLayout>

namespace stoker {

WorkspacePage::WorkspacePage(const QString& title, const QString& purpose, QWidget* parent)
    : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* heading = new QLabel(title, this);
  QFont f = heading->font();
  f.setPointSizeF(f.pointSizeF() * 1.5);
  f.setBold(true);
  heading->setFont(f);
  auto* blurb = new QLabel(purpose, this);
  blurb->setWordWrap(true);
  layout->addWidget(heading);
  layout->addWidget(blurb);
  body_ = new QVBoxLayout();
  layout->addLayout(body_, 1);  // the body takes the room; the header stays at the top
}

}  // namespace stoker
