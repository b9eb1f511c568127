// wait_for: spin the event loop until signals arrived or a condition holds,
// for GUI suites whose work finishes on other threads.
#pragma once

#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTest>
#include <functional>

#include "slowdown.h"

namespace stoker::test {

// `ms` is for a plain build; a sanitizer pass waits slowdown() times longer.
inline bool waitUntil(const std::function<bool()>& done, int ms = 60000) {
  const qint64 limit = qint64(ms) * slowdown();
  QElapsedTimer t;
  t.start();
  while (!done() && t.elapsed() < limit) QTest::qWait(10);
  return done();
}
// Until `spy` has recorded `count` signals.
inline bool waitForCount(QSignalSpy& spy, int count, int ms = 60000) {
  return waitUntil([&] { return spy.size() >= count; }, ms);
}
inline bool waitFor(QSignalSpy& spy, int ms = 60000) { return waitForCount(spy, 1, ms); }

}  // namespace stoker::test
