#include "main_window.h"

#include <QCloseEvent>
#include <QListWidget>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QVBoxLayout>

#include "planner_workspace.h"
#include "workspace_page.h"

namespace stoker {
namespace {

struct WorkspaceText {
  const char* id;
  const char* title;
  const char* purpose;
};

const WorkspaceText kWorkspaces[] = {
    {"loader", "Loader",
     "Tune data-loader settings and watch per-device throughput, memory and prefetch depth live."},
    {"planner", "Planner",
     "See which samples each rank and device gets, for equal or unequal GPUs, and how an epoch resumes."},
    {"checkpoints", "Checkpoints",
     "Open a checkpoint, see how its tensors are split, and convert it to another layout."},
    {"monitor", "Monitor",
     "Attach to a running training job and see whether each GPU is starved or busy."},
};

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Stoker workbench"));
  auto* split = new QSplitter(this);
  nav_ = new QListWidget(split);
  stack_ = new QStackedWidget(split);
  for (const auto& w : kWorkspaces) {
    auto* item = new QListWidgetItem(tr(w.title), nav_);
    item->setData(Qt::UserRole, QString::fromLatin1(w.id));
    auto* page = new WorkspacePage(tr(w.title), tr(w.purpose), stack_);
    if (QString::fromLatin1(w.id) == "planner") page->body()->addWidget(new PlannerWorkspace(page), 1);
    stack_->addWidget(page);
  }
  nav_->setMaximumWidth(180);
  split->setStretchFactor(1, 1);
  split->setSizes({160, 940});
  setCentralWidget(split);
  connect(nav_, &QListWidget::currentRowChanged, stack_, &QStackedWidget::setCurrentIndex);
  nav_->setCurrentRow(0);
  statusBar()->showMessage(tr("Ready"));

  QSettings settings;
  restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
  showWorkspace(settings.value("mainWindow/workspace", "loader").toString());
  if (!settings.contains("mainWindow/geometry")) resize(1100, 720);
}

MainWindow::~MainWindow() = default;

QStringList MainWindow::workspaceIds() {
  QStringList ids;
  for (const auto& w : kWorkspaces) ids << QString::fromLatin1(w.id);
  return ids;
}

bool MainWindow::showWorkspace(const QString& id) {
  int row = workspaceIds().indexOf(id.toLower());
  if (row < 0) return false;
  nav_->setCurrentRow(row);
  return true;
}

QString MainWindow::currentWorkspace() const { return workspaceIds().value(nav_->currentRow()); }

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue("mainWindow/geometry", saveGeometry());
  settings.setValue("mainWindow/workspace", currentWorkspace());
  QMainWindow::closeEvent(event);
}

}  // namespace stoker
