// The guard against clipped forms (issue 39): for each workspace at the window sizes people use
// (1280x800, 1600x1000), every visible control must lie whole inside the window and inside
// every ancestor that clips it. Scroll areas may hide a control below the fold (their vertical
// bar reaches it) but never to the side: a form whose content is wider than its viewport cuts
// buttons off on the right and, once a field takes focus, labels off on the left. Geometry only
// (QWidget rectangles and size hints), so it needs no pixels and runs offscreen.
#include <QtTest>

#include <QAbstractButton>
#include <QAbstractItemView>
#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QTabBar>
#include <QTabWidget>

#include "main_window.h"
#include "telemetry_plots.h"

namespace {

// What a person reads or clicks: the widgets whose clipping loses something.
bool isControl(const QWidget* w) {
  if (qobject_cast<const QAbstractButton*>(w) || qobject_cast<const QComboBox*>(w) ||
      qobject_cast<const QAbstractSpinBox*>(w) || qobject_cast<const QLineEdit*>(w))
    return true;
  if (auto* label = qobject_cast<const QLabel*>(w)) return !label->text().isEmpty();
  return false;
}

// The name a failure message gives a widget: its class, object name and text.
QString describe(const QWidget* w) {
  QString text;
  if (auto* b = qobject_cast<const QAbstractButton*>(w)) text = b->text();
  else if (auto* l = qobject_cast<const QLabel*>(w)) text = l->text().left(40);
  else if (auto* c = qobject_cast<const QComboBox*>(w)) text = c->currentText();
  QString name = w->metaObject()->className();
  if (!w->objectName().isEmpty()) name += "#" + w->objectName();
  if (!text.isEmpty()) name += " \"" + text + "\"";
  return name;
}

QRect rectIn(const QWidget* w, const QWidget* window) { return QRect(w->mapTo(window, QPoint(0, 0)), w->size()); }

// The scroll area whose viewport `w` is, or null.
const QAbstractScrollArea* areaOfViewport(const QWidget* w) {
  auto* area = qobject_cast<const QAbstractScrollArea*>(w->parentWidget());
  return area && area->viewport() == w ? area : nullptr;
}

// Every problem with `window` as laid out now, one line each.
QStringList clippedControls(QWidget* window) {
  QStringList problems;
  const QRect windowRect = window->rect();
  for (QScrollArea* area : window->findChildren<QScrollArea*>()) {
    if (!area->isVisible()) continue;
    if (area->horizontalScrollBarPolicy() == Qt::ScrollBarAlwaysOff && area->horizontalScrollBar()->maximum() > 0)
      problems << QString("%1: content %2 px wide in a %3 px viewport with no horizontal bar")
                      .arg(describe(area))
                      .arg(area->widget() ? area->widget()->width() : -1)
                      .arg(area->viewport()->width());
  }
  for (QWidget* w : window->findChildren<QWidget*>()) {
    if (!w->isVisible() || !isControl(w) || w->window() != window) continue;
    if (w->parentWidget() && isControl(w->parentWidget())) continue;  // a spin box's own line edit
    if (qobject_cast<QAbstractItemView*>(w->parentWidget())) continue;  // a table's corner button
    if (w->width() <= 0 || w->height() <= 0) {
      problems << describe(w) + ": collapsed to nothing";
      continue;
    }
    // Below a scroll area's viewport a control may lie below the fold (the vertical bar reaches
    // it), so from there up only its horizontal extent counts.
    bool scrolled = false;
    for (const QWidget* p = w->parentWidget(); p && p != window; p = p->parentWidget()) scrolled |= areaOfViewport(p) != nullptr;
    auto within = [&](const QRect& outer, const QRect& r) {
      return scrolled ? r.left() >= outer.left() && r.right() <= outer.right() : outer.contains(r);
    };
    const QRect r = rectIn(w, window);
    if (!within(windowRect, r)) {
      problems << QString("%1: %2,%3 %4x%5 lies outside the %6x%7 window")
                      .arg(describe(w)).arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height())
                      .arg(windowRect.width()).arg(windowRect.height());
      continue;
    }
    bool belowViewport = false;  // between the control and its viewport every ancestor clips both ways
    for (const QWidget* p = w->parentWidget(); p && p != window; p = p->parentWidget()) {
      const QRect pr = rectIn(p, window);
      const bool viewport = areaOfViewport(p) != nullptr;
      const bool inside = (viewport || belowViewport) ? r.left() >= pr.left() && r.right() <= pr.right() : pr.contains(r);
      belowViewport |= viewport;
      if (!inside) {
        problems << QString("%1: %2,%3 %4x%5 clipped by %6 at %7,%8 %9x%10")
                        .arg(describe(w)).arg(r.x()).arg(r.y()).arg(r.width()).arg(r.height())
                        .arg(describe(p)).arg(pr.x()).arg(pr.y()).arg(pr.width()).arg(pr.height());
        break;
      }
    }
    // Squeezed below the width its text needs (a button reading "Appl", a spin box without arrows).
    const bool wraps = qobject_cast<const QLabel*>(w) && static_cast<const QLabel*>(w)->wordWrap();
    if (!wraps && !qobject_cast<const QLineEdit*>(w) && w->width() < w->minimumSizeHint().width())
      problems << QString("%1: %2 px wide, needs %3").arg(describe(w)).arg(w->width()).arg(w->minimumSizeHint().width());
  }
  return problems;
}

}  // namespace

class TestWorkbenchGeometry : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QCoreApplication::setOrganizationName("StokerTest");
    QStandardPaths::setTestModeEnabled(true);  // keep QSettings away from the user's
    QSettings().clear();
  }

  void nothingIsClipped_data() {
    QTest::addColumn<QString>("workspace");
    QTest::addColumn<QSize>("size");
    for (const QString& id : stoker::MainWindow::workspaceIds())
      for (const QSize size : {QSize(1280, 800), QSize(1600, 1000)})
        QTest::newRow(qPrintable(QString("%1 %2x%3").arg(id).arg(size.width()).arg(size.height()))) << id << size;
  }

  void nothingIsClipped() {
    QFETCH(QString, workspace);
    QFETCH(QSize, size);
    stoker::MainWindow w;
    w.resize(size);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.showWorkspace(workspace));
    QTest::qWait(50);
    QCOMPARE(w.size(), size);  // a minimum size above it would push the window off the screen
    QStringList problems = clippedControls(&w);
    // Every page of every tab widget (the Sweep, Auto-tune and Stages tabs...), not just the first.
    for (QTabWidget* tabs : w.findChildren<QTabWidget*>()) {
      if (!tabs->isVisible()) continue;
      const int shown = tabs->currentIndex();
      for (int i = 0; i < tabs->count(); ++i) {
        tabs->setCurrentIndex(i);
        QTest::qWait(20);
        for (const QString& p : clippedControls(&w)) problems << tabs->tabText(i) + " tab: " + p;
      }
      tabs->setCurrentIndex(shown);
    }
    // Plot titles are drawn, not laid out: each line must fit its plot (they go on two lines).
    for (auto* plots : w.findChildren<stoker::TelemetryPlots*>())
      if (plots->isVisible())
        for (int p = 0; p < stoker::TelemetryPlots::PlotCount; ++p)
          if (const QString o = plots->titleOverflow(static_cast<stoker::TelemetryPlots::Plot>(p)); !o.isEmpty()) problems << o;
    problems.removeDuplicates();
    QVERIFY2(problems.isEmpty(), qPrintable("\n  " + problems.join("\n  ")));
  }

  // The splitter gives the Loader's form more room or less: the form follows it, and at its
  // narrowest the splitter stops where the form still fits (no sideways scrolling, ever).
  void theLoaderFormFollowsItsSplitter() {
    stoker::MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.showWorkspace("loader");
    auto* area = w.findChild<QScrollArea*>("loaderFormArea");
    QVERIFY(area);
    auto* split = qobject_cast<QSplitter*>(area->parentWidget());
    QVERIFY(split);
    const int total = split->sizes().value(0) + split->sizes().value(1);
    for (const int left : {100, 500, 800}) {
      split->setSizes({left, total - left});
      QTest::qWait(20);
      QVERIFY2(area->horizontalScrollBar()->maximum() == 0, qPrintable(QString("left pane %1 px").arg(left)));
      QCOMPARE(area->widget()->width(), area->viewport()->width());
      const QStringList problems = clippedControls(&w);
      QVERIFY2(problems.isEmpty(), qPrintable(QString("left pane asked %1 px:\n  ").arg(left) + problems.join("\n  ")));
    }
  }
};

QTEST_MAIN(TestWorkbenchGeometry)
#include "tst_workbench_geometry.moc"
