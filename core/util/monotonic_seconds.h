// util/monotonic_seconds: seconds on the steady clock, for timing stages (differences only).
#pragma once

#include <chrono>

namespace stoker {

inline double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace stoker
