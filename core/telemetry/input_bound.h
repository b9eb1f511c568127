// telemetry/input_bound: is a device starved by its input pipeline? The share
// of each iteration spent waiting for data, data_wait / (data_wait + step),
// where step_ms is the time the consumer spent between batches (its training
// step). Below 5 % the input keeps up, 5-20 % it costs noticeable time,
// 20 % and more the device is input-bound.
#pragma once

#include <string>

#include "telemetry/telemetry_record.h"

namespace stoker {

enum class InputBound { Unknown, Fine, Moderate, InputBound };

// Share in [0, 1]; negative when the record carries no timing yet.
double dataWaitShare(double dataWaitMs, double stepMs);
InputBound classifyInputBound(double dataWaitShare);
inline InputBound classifyInputBound(const TelemetryRecord& r) {
  return classifyInputBound(dataWaitShare(r.data_wait_ms, r.step_ms));
}
// "fine", "moderate", "input-bound", "unknown".
std::string inputBoundName(InputBound b);

}  // namespace stoker
