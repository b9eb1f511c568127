// slowdown: how many times slower than a plain build this test process runs. A sanitizer pass
// sets STOKER_TEST_SLOWDOWN (`stoker.sh check` sets 2 for ASan and 4 for TSan, which runs every instruction 5-15x
// slower), and the GUI suites' waits and stall budgets scale by it. Not a benchmark knob: the
// suites measure no speed.
#pragma once

#include <QtGlobal>

namespace stoker::test {

inline int slowdown() {
  bool ok = false;
  const int factor = qEnvironmentVariableIntValue("STOKER_TEST_SLOWDOWN", &ok);
  return ok && factor > 1 ? factor : 1;
}

}  // namespace stoker::test
