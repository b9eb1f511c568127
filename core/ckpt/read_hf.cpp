// The Hugging Face sharded layout: model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}) and the
// shard files it names. Each tensor lives whole in one shard. The index and
// the shards' headers come from local files or, for a remote index, from
// range requests (inspect.cpp opens those).
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/layout_readers.h"
#include "util/error.h"
#include "util/file_exists.h"

namespace stoker {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A weight_map value must name a file inside the checkpoint directory.
bool staysInside(const std::string& file) {
  if (file.empty() || file[0] == '/') return false;
  for (const auto& part : fs::path(file))
    if (part == "..") return false;
  return true;
}

}  // namespace

void readHfIndex(const std::string& indexPath, CheckpointInfo& info) {
  const fs::path dir = fs::path(indexPath).parent_path();
  std::ifstream in(indexPath);
  if (!in) throwIo(indexPath, "cannot open", errno);
  std::stringstream text;
  text << in.rdbuf();
  readHfIndexText(text.str(), indexPath, [&](const std::vector<std::string>& names) {
    std::vector<std::optional<HfShard>> shards;
    for (const auto& f : names) {
      const std::string path = (dir / f).string();
      if (!fileExists(path)) {
        shards.emplace_back();
        continue;
      }
      shards.push_back(HfShard{path, SafetensorsFile::open(path).header(), nullptr});
    }
    return shards;
  }, info);
}

void readHfIndexText(const std::string& text, const std::string& indexPath, const HfShardOpener& openShards,
                     CheckpointInfo& info) {
  info.format = CheckpointFormat::Hf;
  // nlohmann keeps the last of duplicate keys silently; a tensor listed twice
  // in weight_map is a contradiction, so watch the keys while parsing.
  std::set<std::string> keys;
  std::vector<std::string> duplicates;
  bool inWeightMap = false;
  json::parser_callback_t watch = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) inWeightMap = parsed == "weight_map";
    if (event == json::parse_event_t::key && depth == 2 && inWeightMap &&
        !keys.insert(parsed.get<std::string>()).second)
      duplicates.push_back(parsed.get<std::string>());
    return true;
  };
  json index;
  try {
    index = json::parse(text, watch);
  } catch (const json::exception& e) {
    throwBadInput(indexPath, std::string("is not valid JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throwBadInput(indexPath, "has no weight_map object");
  for (const auto& name : duplicates)
    info.problems.push_back("tensor \"" + name + "\" is listed twice in weight_map");

  std::map<std::string, std::string> weightMap;  // tensor -> file, name order
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throwBadInput(indexPath, "weight_map[\"" + name + "\"] is not a file name");
    const std::string f = file.get<std::string>();
    if (!staysInside(f))
      throwBadInput(indexPath, "weight_map[\"" + name + "\"] points to \"" + f +
                                   "\", outside the checkpoint directory");
    weightMap[name] = f;
  }
  std::optional<std::uint64_t> totalSize;
  if (index.contains("metadata") && index["metadata"].is_object()) {
    for (const auto& [k, v] : index["metadata"].items()) {
      if (k == "total_size") {
        if (!v.is_number_unsigned()) throwBadInput(indexPath, "metadata.total_size is not a non-negative integer");
        totalSize = v.get<std::uint64_t>();
      }
      info.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }

  std::set<std::string> fileNames;
  for (const auto& [name, f] : weightMap) fileNames.insert(f);
  const std::vector<std::string> names(fileNames.begin(), fileNames.end());
  std::vector<std::optional<HfShard>> opened = openShards(names);
  std::map<std::string, const SafetensorsHeader*> files;
  std::map<std::string, int> fileIndex;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& f = names[i];
    if (!opened[i]) {
      info.problems.push_back(f + " is named by the index but missing");
      continue;
    }
    files.emplace(f, &opened[i]->header);
    fileIndex[f] = addFile(info, opened[i]->path, opened[i]->remote);
  }
  for (const auto& [f, header] : files)
    for (const auto& e : header->tensors) {
      auto it = weightMap.find(e.name);
      if (it == weightMap.end())
        info.problems.push_back("tensor \"" + e.name + "\" in " + f + " is not listed in the index");
      else if (it->second != f)
        info.problems.push_back("tensor \"" + e.name + "\" appears in both " + it->second + " and " + f);
    }

  std::map<std::string, std::map<std::string, const SafetensorsEntry*>> entries;  // file -> name -> entry
  for (const auto& [f, header] : files)
    for (const auto& e : header->tensors) entries[f][e.name] = &e;
  std::uint64_t sum = 0;
  for (const auto& [name, f] : weightMap) {
    auto file = files.find(f);
    if (file == files.end()) continue;  // reported as missing
    auto e = entries[f].find(name);
    if (e == entries[f].end()) {
      info.problems.push_back("tensor \"" + name + "\": the index says " + f + ", which does not contain it");
      continue;
    }
    LogicalTensor t = logicalTensor(name, e->second->dtype, e->second->shape, e->second->nbytes());
    t.pieces.push_back(wholeTensorPiece(fileIndex[f], *file->second, *e->second));
    sum += t.nbytes;
    info.tensors.push_back(std::move(t));
  }
  if (totalSize && *totalSize != sum && info.problems.empty())
    info.problems.push_back("metadata.total_size is " + std::to_string(*totalSize) + " but the tensors hold " +
                            std::to_string(sum) + " bytes");
}

}  // namespace stoker
