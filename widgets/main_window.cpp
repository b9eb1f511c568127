#include "main_window.h"

#include <QActionGroup>
#include <QCloseEvent>
#include <QMenuBar>
#include <QMessageBox>
#include <QApplication>
#include <QListWidget>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QVBoxLayout>
#include <algorithm>

#include "checkpoints_workspace.h"
#include "data/loader_options.h"
#include "loader_options_form.h"
#include "util/error.h"
#include "loader_workspace.h"
#include "monitor_workspace.h"
#include "planner_workspace.h"
#include "theme.h"
#include "workspace_page.h"
#include "util/open_file_limit.h"
#include "util/redacted_url.h"

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
  raiseOpenFileLimit();  // the Monitor takes a connection per rank
  setWindowTitle(tr("Stoker workbench"));
  auto* split = new QSplitter(this);
  nav_ = new QListWidget(split);
  stack_ = new QStackedWidget(split);
  for (const auto& w : kWorkspaces) {
    auto* item = new QListWidgetItem(tr(w.title), nav_);
    item->setData(Qt::UserRole, QString::fromLatin1(w.id));
    auto* page = new WorkspacePage(tr(w.title), tr(w.purpose), stack_);
    const QString id = QString::fromLatin1(w.id);
    QWidget* body = nullptr;
    if (id == "loader") body = loader_ = new LoaderWorkspace(page);
    if (id == "planner") body = planner_ = new PlannerWorkspace(page);
    if (id == "checkpoints") body = checkpoints_ = new CheckpointsWorkspace(page);
    if (id == "monitor") body = monitor_ = new MonitorWorkspace(page);
    page->body()->addWidget(body, 1);
    stack_->addWidget(page);
  }
  // Wide enough for the longest title in the current font, never cut off
  // ("Checkpoint…" with a scroll bar at the default size) nor collapsed.
  int longest = 0;
  for (int i = 0; i < nav_->count(); ++i)
    longest = std::max(longest, nav_->fontMetrics().horizontalAdvance(nav_->item(i)->text()));
  const int navWidth = longest + 2 * nav_->frameWidth() + 4 * nav_->fontMetrics().averageCharWidth() + 8;
  nav_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  nav_->setTextElideMode(Qt::ElideNone);
  nav_->setMinimumWidth(navWidth);
  nav_->setMaximumWidth(std::max(180, navWidth));
  split->setCollapsible(0, false);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 1);
  split->setSizes({navWidth, 1100 - navWidth});
  setCentralWidget(split);
  connect(nav_, &QListWidget::currentRowChanged, stack_, &QStackedWidget::setCurrentIndex);
  nav_->setCurrentRow(0);
  // The Monitor's "Tune in Loader": a running script's loader, its dataset and options, in the form.
  connect(monitor_, &MonitorWorkspace::tuneRequested, this, [this](const QString& dataset, const QString& options) {
    try {
      const LoaderOptions o = loaderOptionsFromJson(options.toStdString(), "the monitored loader's options");
      loader_->setDataset(dataset);
      loader_->form()->setOptions(o);
      showWorkspace("loader");
      statusBar()->showMessage(tr("The monitored loader's settings (%1): change them and press Run.").arg(dataset));
    } catch (const Error& e) {
      statusBar()->showMessage(tr("Cannot tune that loader: %1").arg(QString::fromUtf8(e.what())));
    }
  });
  statusBar()->showMessage(tr("Ready"));
  // The status bar says what runs, wherever the user is: "Ready" only when nothing does.
  connect(loader_, &LoaderWorkspace::runStarted, this, [this] {
    statusBar()->showMessage(tr("Loader: running %1 — Stop (Ctrl+.) ends it").arg(QString::fromStdString(redactedUrl(loader_->dataset().toStdString()))));
  });
  connect(loader_, &LoaderWorkspace::runFinished, this, [this] { statusBar()->showMessage(tr("Ready")); });
  connect(loader_, &LoaderWorkspace::runStopped, this, [this] { statusBar()->showMessage(tr("Ready: the loader stopped")); });
  connect(loader_, &LoaderWorkspace::runFailed, this, [this] { statusBar()->showMessage(tr("Ready: the loader's run failed")); });
  connect(loader_, &LoaderWorkspace::sweepFinished, this, [this] { statusBar()->showMessage(tr("Ready: the sweep is done")); });
  connect(loader_, &LoaderWorkspace::tuneFinished, this, [this] { statusBar()->showMessage(tr("Ready: auto-tune is done")); });
  buildMenus();

  QSettings settings;
  setTheme(settings.value("mainWindow/theme", "system").toString());
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

bool MainWindow::setTheme(const QString& name) {
  if (!applyTheme(name)) return false;
  theme_ = name;
  for (QAction* a : findChildren<QAction*>())
    if (a->data().toString() == "theme:" + name) a->setChecked(true);
  return true;
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open checkpoint…"), QKeySequence::Open, this, [this] {
    showWorkspace("checkpoints");
    checkpoints_->openDialog();
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  const QStringList ids = workspaceIds();
  for (int i = 0; i < ids.size(); ++i)
    view->addAction(nav_->item(i)->text(), QKeySequence(Qt::CTRL | static_cast<Qt::Key>(Qt::Key_1 + i)), this,
                    [this, id = ids[i]] { showWorkspace(id); });
  view->addSeparator();
  QMenu* themes = view->addMenu(tr("&Theme"));
  auto* group = new QActionGroup(this);
  for (const QString& name : themeNames()) {
    QAction* a = themes->addAction(name == "system" ? tr("System") : name == "light" ? tr("Light") : tr("Dark"));
    a->setCheckable(true);
    a->setData("theme:" + name);
    group->addAction(a);
    connect(a, &QAction::triggered, this, [this, name] { setTheme(name); });
  }

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Keyboard shortcuts"), this, [this] {
    QMessageBox::information(this, tr("Keyboard shortcuts"),
                             tr("Ctrl+1 … Ctrl+4  switch workspace\n"
                                "Ctrl+R  Run (Loader), Convert (Checkpoints), Listen (Monitor)\n"
                                "Ctrl+.  Stop / Cancel\n"
                                "Ctrl+D  Dry run (Checkpoints)\n"
                                "Ctrl+O  Open a checkpoint\n"
                                "Ctrl+Shift+O  Replay or follow telemetry (Monitor)\n"
                                "Ctrl+Q  Quit"));
  });
  help->addAction(tr("&About Stoker"), this, [this] {
    QMessageBox::about(this, tr("About Stoker"),
                       tr("Stoker %1: keep GPUs fed.\nTune data loaders, plan sharding, reshard checkpoints and "
                          "monitor training input.").arg(QApplication::applicationVersion()));
  });
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // A conversion stopped by closing is resumable, but a user who closed the window by habit (or
  // by mistake) should not find it stopped an hour later: ask first.
  if (checkpoints_->converting()) {
    const auto answer = QMessageBox::question(this, tr("A conversion is running"),
                                              tr("Stop the conversion and quit? The files it finished stay; Resume "
                                                 "completes it later."),
                                              QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
    checkpoints_->cancel();
  }
  if (monitor_->writingSession() &&
      QMessageBox::question(this, tr("A session is being saved"),
                            tr("Stop writing the Monitor's session and quit? The file is not written."),
                            QMessageBox::Yes | QMessageBox::No, QMessageBox::No) != QMessageBox::Yes) {
    event->ignore();
    return;
  }
  QSettings settings;
  settings.setValue("mainWindow/geometry", saveGeometry());
  settings.setValue("mainWindow/workspace", currentWorkspace());
  settings.setValue("mainWindow/theme", theme_);
  QMainWindow::closeEvent(event);
}

}  // namespace stoker
