// expect_error: checks that a call throws stoker::Error of a given kind
// whose message names what the user got wrong. For suites that link
// stoker_core.
#pragma once

#include <QString>
#include <QStringList>

#include "util/error.h"

namespace stoker::test {

// Runs `f`, expecting Error(kind) whose message contains every part.
// Returns an empty string on success, else what went wrong (for QVERIFY2).
template <typename F>
QString expectError(F f, ErrorKind kind, const QStringList& parts) {
  try {
    f();
  } catch (const Error& e) {
    const QString msg = QString::fromStdString(e.what());
    if (e.kind() != kind) return "wrong kind: " + msg;
    for (const auto& p : parts)
      if (!msg.contains(p)) return "message lacks \"" + p + "\": " + msg;
    return {};
  }
  return "no error";
}

template <typename F>
QString expectBadInput(F f, const QStringList& parts) {
  return expectError(f, ErrorKind::BadInput, parts);
}

}  // namespace stoker::test

// Checks an expectError/expectBadInput result inside a Qt Test function, printing what came instead.
#define NAMED(check)                                    \
  do {                                                  \
    const QString problem_ = (check);                   \
    QVERIFY2(problem_.isEmpty(), qPrintable(problem_)); \
  } while (0)
