// telemetry/stragglers: which ranks hold a job back. In a synchronous job
// (DDP) every rank's iteration takes as long as the slowest one's, so the
// straggler shows in *where* its time goes: a rank whose data wait (or whose
// step) is far above the others'. "Far" is a robust z-score -- distance from
// the median in units of the median absolute deviation, which one slow rank
// cannot inflate -- above 3.5 (Iglewicz and Hoaglin's cut-off), and at least
// 1 ms and 5 % of the iteration above the median, so that noise among fast
// ranks names nobody. Two ranks have no majority: there the rank that is
// input-bound (wait >= 20 % of its iteration) while the other is not is named.
#pragma once

#include <string>
#include <vector>

#include "telemetry/telemetry_record.h"

namespace stoker {

struct RankTiming {
  int rank = 0;
  std::string device;
  double data_wait_ms = 0;
  double step_ms = 0;
};

struct Straggler {
  int rank = 0;
  std::string device;
  std::string metric;  // "data wait" or "step"
  double value_ms = 0;
  double median_ms = 0;  // the median across ranks (two ranks: the other one's figure)
  double z = 0;  // robust z-score; 0 for the two-rank rule
};

std::vector<Straggler> findStragglers(const std::vector<RankTiming>& ranks);
// What findStragglers judges in a live job: each (rank, device)'s newest record, leaving out those
// more than `staleSeconds` older than the newest of all -- a stopped or restarted process's old
// series, or a loader that ran once, is no straggler.
std::vector<RankTiming> liveRankTimings(const std::vector<const TelemetryRecord*>& latest, double staleSeconds = 10);
// "rank 3 (cuda:0): data wait 52.1 ms vs 0.3 ms typical of the others".
std::string describeStraggler(const Straggler& s);

}  // namespace stoker
