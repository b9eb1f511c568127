// event_loop_probe: measures the longest the GUI event loop went without
// running a 5 ms timer -- the "never stalls more than 50 ms" check of the
// workspaces. Start it, drive the widget, read worstMs().
#pragma once

#include <QDir>
#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>
#include <algorithm>

#include "slowdown.h"

namespace stoker::test {

class EventLoopProbe {
 public:
  EventLoopProbe() {
    timer_.setInterval(5);
    QObject::connect(&timer_, &QTimer::timeout, [this] { worst_ = std::max(worst_, gap_.restart()); });
  }
  void start() {
    worst_ = 0;
    gap_.start();
    timer_.start();
  }
  void stop() { timer_.stop(); }
  qint64 worstMs() const { return worst_; }

 private:
  QTimer timer_;
  QElapsedTimer gap_;
  qint64 worst_ = 0;
};

// The longest stall a workspace may show: 50 ms, scaled by a sanitizer pass's slowdown.
inline qint64 stallBudgetMs() { return 50 * slowdown(); }

// With STOKER_SCREENSHOT_DIR set, saves `widget` as NAME.png there: the
// screenshots of populated workspaces the README shows come from the tests.
inline void saveScreenshot(QWidget* widget, const QString& name) {
  const QString dir = qEnvironmentVariable("STOKER_SCREENSHOT_DIR");
  if (dir.isEmpty()) return;
  QDir().mkpath(dir);
  widget->grab().save(QDir(dir).filePath(name + ".png"), "PNG");
}

}  // namespace stoker::test
