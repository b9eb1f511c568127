// data/measure_spec: how precisely measureLoader (data/loader_measure.h)
// measures one setting. Its own header, free of libtorch, so widget headers
// can hold one.
#pragma once

namespace stoker {

struct MeasureSpec {
  double warmupSeconds = 0.3;      // dropped: page faults, pool growth, thread start
  double targetRelativeCi = 0.03;  // stop once the 95 % interval is within +-3 % of the mean
  double minSeconds = 0.4;         // measure at least this long after the warm-up
  double maxSeconds = 5;           // and at most this long
  int windowMs = 50;               // telemetry window: one rate sample each
};

}  // namespace stoker
