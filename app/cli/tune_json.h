// tune_json: the auto-tuner's result as the JSON document `stoker tune --json` prints (and
// stoker.tune() returns in Python).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker {
struct TuneResult;
nlohmann::json tuneJson(const TuneResult& r, const std::string& dataset, const std::string& device, double budgetSeconds);
}  // namespace stoker
