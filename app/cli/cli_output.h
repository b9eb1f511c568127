// cli_output: shared formatting for the stoker commands (sizes, shapes, the
// JSON the contract in DESIGN.md fixes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/byte_size.h"  // humanBytes

namespace stoker {
struct CheckpointInfo;
struct ReshardPlan;
struct ConvertOptions;
struct ConvertReport;

nlohmann::json checkpointJson(const CheckpointInfo& info);
// Prints one JSON document on stdout; invalid UTF-8 from hostile files is replaced, never thrown.
void printJson(const nlohmann::json& doc);
void printCheckpointTable(const CheckpointInfo& info);
nlohmann::json planJson(const CheckpointInfo& source, const ReshardPlan& plan, const ConvertOptions& options);
void printPlanTable(const CheckpointInfo& source, const ReshardPlan& plan, const ConvertOptions& options);
nlohmann::json convertJson(const CheckpointInfo& source, const ReshardPlan& plan, const std::string& dst,
                           const ConvertReport& report);
void printConvertSummary(const ReshardPlan& plan, const std::string& dst, const ConvertReport& report);
}  // namespace stoker
