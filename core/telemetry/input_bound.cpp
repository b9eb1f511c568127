#include "telemetry/input_bound.h"

#include <cmath>

namespace stoker {

double dataWaitShare(double dataWaitMs, double stepMs) {
  if (!std::isfinite(dataWaitMs) || !std::isfinite(stepMs) || dataWaitMs < 0 || stepMs < 0) return -1;
  const double iteration = dataWaitMs + stepMs;
  return iteration > 0 ? dataWaitMs / iteration : -1;
}

InputBound classifyInputBound(double share) {
  if (share < 0) return InputBound::Unknown;
  if (share < 0.05) return InputBound::Fine;
  if (share < 0.20) return InputBound::Moderate;
  return InputBound::InputBound;
}

std::string inputBoundName(InputBound b) {
  switch (b) {
    case InputBound::Fine: return "fine";
    case InputBound::Moderate: return "moderate";
    case InputBound::InputBound: return "input-bound";
    case InputBound::Unknown: break;
  }
  return "unknown";
}

}  // namespace stoker
