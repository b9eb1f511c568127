// eta_text: "42 s", "3 min 5 s" or "?" for a progress ETA in seconds (-1 = unknown).
#pragma once

#include <QString>

namespace stoker {

inline QString etaText(double seconds) {
  if (seconds < 0) return QStringLiteral("?");
  const int s = static_cast<int>(seconds + 0.5);
  return s >= 60 ? QString("%1 min %2 s").arg(s / 60).arg(s % 60) : QString("%1 s").arg(s);
}

}  // namespace stoker
