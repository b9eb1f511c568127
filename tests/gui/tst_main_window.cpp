// The workbench shell: its four workspaces, switching between them, and the
// offscreen --screenshot path that docs and checks rely on.
#include <QtTest>

#include <QImage>
#include <QAbstractButton>
#include <QAction>
#include <QMap>
#include <QProgressBar>
#include <QSignalSpy>
#include <QListWidget>
#include <QScrollBar>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>

#include "data/loader_options.h"
#include "loader_options_form.h"
#include "loader_workspace.h"
#include "main_window.h"
#include "monitor_workspace.h"
#include "test_support.h"

class TestMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);  // keep QSettings away from the user's
  }

  // Seen as a new user: the first launch opens on the Loader, and the workspace list shows every
  // title whole at the default size (it was cut to "Checkpoint…" with a horizontal scroll bar).
  void firstLaunchOpensOnTheLoaderWithTheListWhole() {
    QSettings().clear();
    stoker::MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCOMPARE(w.currentWorkspace(), QString("loader"));
    auto* nav = w.findChild<QListWidget*>();
    QVERIFY(!nav->horizontalScrollBar()->isVisible());
    for (int i = 0; i < nav->count(); ++i) {
      const QRect r = nav->visualItemRect(nav->item(i));
      const int textWidth = nav->fontMetrics().horizontalAdvance(nav->item(i)->text());
      QVERIFY2(textWidth <= nav->viewport()->width() - 4,
               qPrintable(QString("%1: %2 px of text in a %3 px list").arg(nav->item(i)->text()).arg(textWidth)
                              .arg(nav->viewport()->width())));
      QVERIFY(r.right() <= nav->viewport()->width());
    }
    w.resize(700, 500);  // narrower: the list keeps its width, the workspace gives way
    QTest::qWait(20);
    QVERIFY(nav->width() >= nav->minimumWidth());
  }

  // Issue 39: while the loader runs the status bar says so (it said "Ready"), and an until-Stop
  // run's progress bar does not read 100 % after Stop.
  void statusBarAndProgressFollowAnUntilStopRun() {
    stoker::MainWindow w;
    auto* loader = w.loader();
    loader->setDataset("synthetic:100000,16");
    loader->setDevices("cpu");
    loader->setEpochs(0);  // until Stop
    stoker::LoaderOptions o;
    o.batch_size = 64;
    o.num_workers = 1;
    loader->form()->setOptions(o);
    QSignalSpy started(loader, &stoker::LoaderWorkspace::runStarted);
    loader->run();
    QCOMPARE(started.size(), 1);
    QVERIFY2(w.statusBar()->currentMessage().contains("running synthetic:100000,16"), qPrintable(w.statusBar()->currentMessage()));
    QTest::qWait(300);
    QSignalSpy finished(loader, &stoker::LoaderWorkspace::runFinished), stopped(loader, &stoker::LoaderWorkspace::runStopped);
    loader->stop();
    QVERIFY(QTest::qWaitFor([&] { return !finished.isEmpty() || !stopped.isEmpty(); }, 10000));
    auto* bar = loader->findChild<QProgressBar*>();
    QVERIFY(bar);
    QVERIFY2(bar->text() != "100%" && bar->text() == "stopped", qPrintable(bar->text()));
    QVERIFY2(w.statusBar()->currentMessage().startsWith("Ready"), qPrintable(w.statusBar()->currentMessage()));
  }

  void hasFourWorkspacesAndSwitches() {
    stoker::MainWindow w;
    QCOMPARE(stoker::MainWindow::workspaceIds(), (QStringList{"loader", "planner", "checkpoints", "monitor"}));
    auto* stack = w.findChild<QStackedWidget*>();
    QVERIFY(stack);
    QCOMPARE(stack->count(), 4);
    QVERIFY(w.showWorkspace("checkpoints"));
    QCOMPARE(stack->currentIndex(), 2);
    QCOMPARE(w.currentWorkspace(), QString("checkpoints"));
    QVERIFY(!w.showWorkspace("nonsense"));
    QCOMPARE(w.currentWorkspace(), QString("checkpoints"));
    auto* nav = w.findChild<QListWidget*>();
    nav->setCurrentRow(3);
    QCOMPARE(w.currentWorkspace(), QString("monitor"));
  }

  // No key has two live shortcuts in any workspace: Qt calls such a key ambiguous and runs
  // neither (the Monitor's Open… and File > Open checkpoint were both Ctrl+O).
  void noShortcutIsAmbiguous() {
    stoker::MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    for (const QString& id : stoker::MainWindow::workspaceIds()) {
      QVERIFY(w.showWorkspace(id));
      QMap<QString, QString> owner;  // key -> what it runs
      const auto claim = [&](const QKeySequence& key, const QString& what) {
        if (key.isEmpty() || key[0].keyboardModifiers() == Qt::AltModifier) return;  // mnemonics cycle: not ambiguous
        QVERIFY2(!owner.contains(key.toString()),
                 qPrintable(QString("%1: %2 is both %3 and %4").arg(id, key.toString(), owner.value(key.toString()), what)));
        owner.insert(key.toString(), what);
      };
      for (const QAction* a : w.findChildren<QAction*>())
        for (const QKeySequence& key : a->shortcuts()) claim(key, "action " + a->text());
      for (const QAbstractButton* b : w.findChildren<QAbstractButton*>())
        if (b->isVisibleTo(&w) && !b->shortcut().isEmpty()) claim(b->shortcut(), "button " + b->text());
    }
  }

  // The Monitor's "Tune in Loader" fills the Loader workspace with the running loader's dataset
  // and options and switches to it; options it cannot read leave the form alone, with a message.
  void monitorHandsALoaderToTheLoaderWorkspace() {
    stoker::MainWindow w;
    w.showWorkspace("monitor");
    Q_EMIT w.monitor()->tuneRequested("synthetic:1000,16", R"({"batch_size": 48, "num_workers": 3})");
    QCOMPARE(w.currentWorkspace(), QString("loader"));
    QCOMPARE(w.loader()->dataset(), QString("synthetic:1000,16"));
    QCOMPARE(w.loader()->form()->options().batch_size, std::int64_t(48));
    QCOMPARE(w.loader()->form()->options().num_workers, 3);
    w.showWorkspace("monitor");
    Q_EMIT w.monitor()->tuneRequested("fashion-mnist", R"({"batch_size": -1})");
    QCOMPARE(w.currentWorkspace(), QString("monitor"));
    QCOMPARE(w.loader()->form()->options().batch_size, std::int64_t(48));
    QVERIFY(w.statusBar()->currentMessage().contains("batch_size"));
  }

  void themesShortcutsAndSettingsPersist() {
    {
      stoker::MainWindow w;
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      QVERIFY(w.setTheme("dark"));
      QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
      QVERIFY(!w.setTheme("purple"));
      QCOMPARE(w.theme(), QString("dark"));
      QTest::keyClick(&w, Qt::Key_3, Qt::ControlModifier);  // View > Checkpoints
      QCOMPARE(w.currentWorkspace(), QString("checkpoints"));
      QTest::keyClick(&w, Qt::Key_4, Qt::ControlModifier);
      QCOMPARE(w.currentWorkspace(), QString("monitor"));
      w.close();  // saves geometry, workspace and theme
    }
    stoker::MainWindow again;
    QCOMPARE(again.currentWorkspace(), QString("monitor"));
    QCOMPARE(again.theme(), QString("dark"));
    QVERIFY(again.setTheme("light"));
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() > 150);
    again.close();
  }

  void screenshotEachWorkspace() {
    for (const QString& id : stoker::MainWindow::workspaceIds()) {
      const QString png = dir_.filePath(id + ".png");
      auto r = stoker::test::run(STOKER_WORKBENCH_PATH, {"--workspace", id, "--screenshot", png});
      QVERIFY2(r.exitCode == 0, r.err.constData());
      QImage image(png);
      QVERIFY2(!image.isNull(), qPrintable("no image for " + id));
      QVERIFY(image.width() >= 800 && image.height() >= 500);
    }
    auto bad = stoker::test::run(STOKER_WORKBENCH_PATH, {"--workspace", "nope", "--screenshot", dir_.filePath("x.png")});
    QCOMPARE(bad.exitCode, 2);
    QVERIFY(bad.err.contains("unknown workspace"));
  }
};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
