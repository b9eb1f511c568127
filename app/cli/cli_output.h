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
// Prints one JSON document on stdout; invalid UTF-8 from hostile files is replaced, never thrown.
void printJson(const nlohmann::json& doc);
void printCheckpointTable(const CheckpointInfo& info);
}  // namespace stoker
