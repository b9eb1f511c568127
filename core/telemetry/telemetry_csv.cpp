#include "telemetry/telemetry_csv.h"

#include <charconv>
#include <vector>

namespace stoker {

namespace {

std::string number(double v) {
  if (!isKnown(v)) return {};
  char buf[40];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
template <class Int>
std::string count(Int v) {
  return isKnown(v) ? std::to_string(v) : std::string();
}

// RFC 4180: a text with a comma, quote or line break is quoted, its quotes doubled. A text from
// the network that a spreadsheet would run as a formula (=, +, -, @, a tab or a carriage return
// first; OWASP's CSV injection rule) starts with a ' instead.
std::string text(const std::string& given) {
  const bool formula = !given.empty() && std::string("=+-@\t\r").find(given.front()) != std::string::npos;
  const std::string v = formula ? "'" + given : given;
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string stage(const TelemetryRecord& r, const char* name) {
  const auto it = r.stages_ms.find(name);
  return it == r.stages_ms.end() ? std::string() : number(it->second);
}

}  // namespace

std::string telemetryCsvHeader() {
  std::string h =
      "time,host,pid,rank,local_rank,world_size,device,loader,source,worker,epoch,step,steps_total,epoch_end,"
      "samples_per_s,bytes_per_s,data_wait_ms,step_ms,batch_latency_p50_ms,batch_latency_p99_ms,prefetch_depth,"
      "ready,mode,mem_used,mem_reserved,mem_allocated,mem_total,pinned_bytes,dropped,net_requests,net_bytes,net_retries";
  for (const char* s : kTelemetryStages) h += std::string(",stage_") + s + "_ms";
  return h;
}

std::string telemetryCsvRow(const TelemetryRecord& r) {
  const std::vector<std::string> cells = {
      number(r.time), text(r.host), std::to_string(r.pid), std::to_string(r.rank), count(r.local_rank),
      count(r.world_size), text(r.device), text(r.loader), text(r.source), std::to_string(r.worker),
      std::to_string(r.epoch), std::to_string(r.step), std::to_string(r.steps_total), r.epoch_end ? "1" : "0",
      number(r.samples_per_s), number(r.bytes_per_s), number(r.data_wait_ms), number(r.step_ms),
      number(r.batch_latency_p50_ms), number(r.batch_latency_p99_ms), count(r.prefetch_depth), count(r.ready),
      text(r.mode), count(r.mem_used), count(r.mem_reserved), count(r.mem_allocated), count(r.mem_total),
      count(r.pinned_bytes), count(r.dropped), count(r.net_requests), count(r.net_bytes), count(r.net_retries)};
  std::string row;
  for (std::size_t i = 0; i < cells.size(); ++i) row += (i ? "," : "") + cells[i];
  for (const char* s : kTelemetryStages) row += "," + stage(r, s);
  return row;
}

}  // namespace stoker
