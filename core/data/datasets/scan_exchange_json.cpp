#include "data/datasets/scan_exchange_json.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace stoker {
namespace {

// Whether `text` can travel in JSON (it is UTF-8).
bool travelsAsJson(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

ScanExchange scanExchangeOverJson(std::function<std::string(const std::string& mine)> gatherAll) {
  return [gatherAll = std::move(gatherAll)](const std::vector<ScannedShard>& mine) {
    nlohmann::json sent = nlohmann::json::array();
    for (const ScannedShard& s : mine)
      if (travelsAsJson(s.url))
        sent.push_back({{"shard", s.shard}, {"url", s.url}, {"size", s.size}, {"etag", travelsAsJson(s.etag) ? s.etag : ""},
                        {"index", travelsAsJson(s.index) ? s.index : ""}});
    const std::string got = gatherAll(sent.dump());
    std::vector<ScannedShard> all;
    auto take = [&all](const nlohmann::json& e) {
      all.push_back(ScannedShard{e.at("shard").get<std::int64_t>(), e.at("url").get<std::string>(),
                                 e.at("size").get<std::uint64_t>(), e.at("etag").get<std::string>(),
                                 e.at("index").get<std::string>()});
    };
    try {
      for (const nlohmann::json& x : nlohmann::json::parse(got))
        if (x.is_array()) for (const nlohmann::json& e : x) take(e);
        else take(x);
    } catch (const nlohmann::json::exception& e) {
      throwBadInput("sharing WebDataset scans", std::string("the exchange returned no list of scans: ") + e.what());
    }
    return all;
  };
}

}  // namespace stoker
