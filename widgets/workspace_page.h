// workspace_page: the frame every workspace shares -- a title, a one-line
// purpose and the body the workspace fills in.
#pragma once

#include <QWidget>

class QVBoxLayout;

namespace stoker {

class WorkspacePage : public QWidget {
  Q_OBJECT
 public:
  WorkspacePage(const QString& title, const QString& purpose, QWidget* parent = nullptr);
  QVBoxLayout* body() const { return body_; }

 private:
  QVBoxLayout* body_;
};

}  // namespace stoker
