// main_window: the workbench window -- a list of workspaces (Loader, Planner,
// Checkpoints, Monitor) beside the active one, menus with keyboard
// shortcuts, a light/dark theme choice; restores its geometry, workspace and
// theme from QSettings.
#pragma once

#include <QMainWindow>
#include <QStringList>

class QListWidget;
class QStackedWidget;

namespace stoker {

class CheckpointsWorkspace;
class LoaderWorkspace;
class MonitorWorkspace;
class PlannerWorkspace;

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
  // "system", "light" or "dark"; false for another name.
  bool setTheme(const QString& name);
  QString theme() const { return theme_; }

  LoaderWorkspace* loader() const { return loader_; }
  PlannerWorkspace* planner() const { return planner_; }
  CheckpointsWorkspace* checkpoints() const { return checkpoints_; }
  MonitorWorkspace* monitor() const { return monitor_; }

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildMenus();

  QListWidget* nav_;
  QStackedWidget* stack_;
  LoaderWorkspace* loader_ = nullptr;
  PlannerWorkspace* planner_ = nullptr;
  CheckpointsWorkspace* checkpoints_ = nullptr;
  MonitorWorkspace* monitor_ = nullptr;
  QString theme_ = "system";
};

}  // namespace stoker
