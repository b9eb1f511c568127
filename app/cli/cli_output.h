// cli_output: shared formatting for the stoker commands (sizes, shapes, the
// JSON the contract in DESIGN.md fixes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stoker {
struct CheckpointInfo;

std::string humanBytes(std::uint64_t n);
std::string shapeString(const std::vector<std::int64_t>& shape);
nlohmann::json checkpointJson(const CheckpointInfo& info);
void printCheckpointTable(const CheckpointInfo& info);
}  // namespace stoker
