// util/busy_work: keep this thread's core busy for a while. Stands in for
// CPU work (decoding a sample, a training step) in synthetic datasets and
// benchmarks: a sleep would free the core and make scaling look ideal.
#pragma once

#include <chrono>

namespace stoker {

inline void busyWork(double micros) {
  if (micros <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(micros);
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace stoker
