// telemetry/telemetry_csv: telemetry records as CSV, for spreadsheets and
// plotting scripts (the Monitor's export). One row per record, every field of
// the JSON; an unknown figure is an empty cell, never 0; per-stage times are
// columns stage_<name>_ms.
#pragma once

#include <string>

#include "telemetry/telemetry_record.h"

namespace stoker {

std::string telemetryCsvHeader();                        // no newline
std::string telemetryCsvRow(const TelemetryRecord& r);  // no newline

}  // namespace stoker
