#include "cli_output.h"

#include <algorithm>
#include <cstdio>

#include "ckpt/inspect.h"

namespace stoker {

std::string humanBytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string shapeString(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

nlohmann::json checkpointJson(const CheckpointInfo& info) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : info.tensors)
    tensors.push_back({{"name", t.name}, {"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape},
                       {"nbytes", t.nbytes}});
  nlohmann::json doc;
  doc["format"] = formatName(info.format);
  doc["world_size"] = info.worldSize ? nlohmann::json(*info.worldSize) : nlohmann::json(nullptr);
  doc["tensors"] = std::move(tensors);
  doc["metadata"] = info.metadata;
  doc["total_bytes"] = info.totalBytes();
  return doc;
}

void printJson(const nlohmann::json& doc) {
  std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void printCheckpointTable(const CheckpointInfo& info) {
  std::size_t nameWidth = 4;
  for (const auto& t : info.tensors) nameWidth = std::max(nameWidth, t.name.size());
  nameWidth = std::min<std::size_t>(nameWidth, 60);
  std::printf("%s: %s, %zu tensors, %s\n", info.path.c_str(), formatName(info.format).c_str(),
              info.tensors.size(), humanBytes(info.totalBytes()).c_str());
  std::printf("%-*s  %-7s  %-24s  %s\n", static_cast<int>(nameWidth), "name", "dtype", "shape", "size");
  for (const auto& t : info.tensors)
    std::printf("%-*s  %-7s  %-24s  %s\n", static_cast<int>(nameWidth), t.name.c_str(),
                std::string(dtypeName(t.dtype)).c_str(), shapeString(t.shape).c_str(),
                humanBytes(t.nbytes).c_str());
  for (const auto& [k, v] : info.metadata) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
}

}  // namespace stoker
