// main_window: the workbench window -- a list of workspaces (Loader, Planner,
// Checkpoints, Monitor) beside the active one; restores its geometry.
#pragma once

#include <QMainWindow>
#include <QStringList>

class QListWidget;
class QStackedWidget;

namespace stoker {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Workspace ids accepted by --workspace, in display order.
  static QStringList workspaceIds();
  // Shows the workspace with id `id` ("loader", ...); false if unknown.
  bool showWorkspace(const QString& id);
  QString currentWorkspace() const;

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  QListWidget* nav_;
  QStackedWidget* stack_;
};

}  // namespace stoker
