// util/busy_work: keep this thread's core busy for a while. Stands in for
// CPU work (decoding a sample, a training step) in synthetic datasets and
// benchmarks: a sleep would free the core and make scaling look ideal.
#pragma once

#include <chrono>
#include <cmath>
#include <string>

#include "util/error.h"

namespace stoker {

// The longest simulated step or cost taken anywhere (10 s, as the synthetic dataset's cost_us):
// busy work is not cancelled, so an endless one (inf) would outlive Ctrl-C.
inline constexpr double kMaxBusyMicros = 1e7;

// Refuses what busyWork must not be given: a negative, NaN, infinite or absurd step.
inline void requireBusyMicros(const std::string& name, double micros) {
  if (!(micros >= 0 && micros <= kMaxBusyMicros))
    throwBadInput(name, "must be 0-10000000 microseconds (got " + std::to_string(micros) + ")");
}

inline void busyWork(double micros) {
  if (micros <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(micros);
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace stoker
