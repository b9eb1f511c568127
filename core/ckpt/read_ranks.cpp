// The ranks layout: metadata.json ({"num_ranks", "tensor_specs": {name:
// {"full_shape", "shard_dim", "shard_sizes"}}}) and rank_<r>.safetensors.
// Malformed JSON or files are errors; contradictions between metadata and
// files are collected as problems, so inspect can show them all.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/layout_readers.h"
#include "ckpt/ranks_metadata.h"
#include "net/http_transfer.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/file_exists.h"
#include "util/run_jobs.h"

namespace stoker {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::int64_t dimValue(const json& v, const std::string& subject, const std::string& field) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > (1ull << 62))
    throwBadInput(subject, field + " must hold non-negative integers");
  return v.get<std::int64_t>();
}

struct Spec {
  std::vector<std::int64_t> fullShape;
  std::optional<int> shardDim;
  std::vector<std::int64_t> shardSizes;
};

Spec parseSpec(const std::string& name, const json& v, int numRanks, const std::string& subject,
               std::vector<std::string>& problems) {
  const std::string where = subject + ": tensor_specs[\"" + name + "\"]";
  if (!v.is_object()) throwBadInput(where, "is not an object");
  Spec s;
  if (!v.contains("full_shape") || !v["full_shape"].is_array()) throwBadInput(where, "has no full_shape array");
  for (const auto& d : v["full_shape"]) s.fullShape.push_back(dimValue(d, where, "full_shape"));
  if (!v.contains("shard_dim")) throwBadInput(where, "has no shard_dim (use null for a replicated tensor)");
  const json& dim = v["shard_dim"];
  if (!dim.is_null()) {
    if (!dim.is_number_unsigned()) throwBadInput(where, "shard_dim must be a non-negative integer or null");
    if (dim.get<std::uint64_t>() >= s.fullShape.size())
      throwBadInput(where, "shard_dim " + dim.dump() + " is not a dimension of full_shape " + shapeText(s.fullShape));
    s.shardDim = dim.get<int>();
  }
  if (v.contains("shard_sizes") && !v["shard_sizes"].is_null()) {
    if (!v["shard_sizes"].is_array()) throwBadInput(where, "shard_sizes is not an array");
    for (const auto& d : v["shard_sizes"]) s.shardSizes.push_back(dimValue(d, where, "shard_sizes"));
  }
  if (s.shardDim) {
    if (s.shardSizes.size() != static_cast<std::size_t>(numRanks)) {
      problems.push_back("tensor \"" + name + "\": shard_sizes has " + std::to_string(s.shardSizes.size()) +
                         " entries for num_ranks " + std::to_string(numRanks));
    } else {
      std::int64_t sum = 0;
      for (auto x : s.shardSizes) sum += x;
      if (sum != s.fullShape[*s.shardDim])
        problems.push_back("tensor \"" + name + "\": shard_sizes sum to " + std::to_string(sum) +
                           " but full_shape[" + std::to_string(*s.shardDim) + "] is " +
                           std::to_string(s.fullShape[*s.shardDim]));
    }
  }
  return s;
}

// metadata.json's text, from a local folder or a folder URL.
std::string metadataText(const std::string& metaPath, bool remote) {
  if (remote) return RemoteObject::open(metaPath, 1 << 20)->whole(64ull << 20, "a ranks metadata.json");
  std::ifstream in(metaPath);
  if (!in) throwIo(metaPath, "cannot open", errno);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A rank file's header, and its tensors by name.
struct RankFile {
  SafetensorsHeader header;
  std::map<std::string, const SafetensorsEntry*> byName;
  int index = -1;  // in info.files
  const SafetensorsEntry* find(const std::string& name) const {
    const auto it = byName.find(name);
    return it == byName.end() ? nullptr : it->second;
  }
};

// A rank file's save step against metadata.json's (or, where that has none, the first rank
// file's): ranks of two saves -- a save into this directory still running, or one a rank died in --
// are refused as a problem, never read as one checkpoint.
void checkSaveStep(const SafetensorsHeader& header, const std::string& file, const std::optional<std::int64_t>& saveStep,
                   std::optional<std::pair<std::string, std::string>>& firstStep, std::vector<std::string>& problems) {
  const auto it = header.metadata.find(kSaveStepKey);
  const std::string step = it == header.metadata.end() ? "none" : it->second;
  const std::string interrupted = ": a save into this directory is still running or was interrupted";
  if (saveStep) {
    if (step != std::to_string(*saveStep))
      problems.push_back(file + " is from save step " + step + ", metadata.json from step " +
                         std::to_string(*saveStep) + interrupted);
    return;
  }
  if (!firstStep) {
    firstStep.emplace(file, step);
  } else if (firstStep->second != step) {
    problems.push_back(file + " is from save step " + step + ", " + firstStep->first + " from step " +
                       firstStep->second + interrupted);
  }
}

}  // namespace

// The ranks layout, from a folder or (a URL ending in '/') from S3 or HTTP(S): there the rank
// files' headers are read by range requests, eight at a time, and extra rank files are not looked
// for (a folder URL cannot be listed over HTTP).
void readRanksDirectory(const std::string& dir, CheckpointInfo& info) {
  info.format = CheckpointFormat::Ranks;
  const bool remote = isRemotePath(dir);
  const std::string folder = remote ? (dir.back() == '/' ? dir : dir + "/") : dir;
  const fs::path root(dir);
  const std::string metaPath = remote ? folder + "metadata.json" : (root / "metadata.json").string();
  const std::string text = metadataText(metaPath, remote);
  json meta;
  try {
    meta = json::parse(text);
  } catch (const json::exception& e) {
    throwBadInput(metaPath, std::string("is not valid JSON: ") + e.what());
  }
  if (!meta.is_object()) throwBadInput(metaPath, "is not a JSON object");
  if (!meta.contains("num_ranks") || !meta["num_ranks"].is_number_unsigned() ||
      meta["num_ranks"].get<std::uint64_t>() < 1 || meta["num_ranks"].get<std::uint64_t>() > 1000000)
    throwBadInput(metaPath, "num_ranks must be an integer from 1 to 1000000");
  const int numRanks = meta["num_ranks"].get<int>();
  info.worldSize = numRanks;
  if (!meta.contains("tensor_specs") || !meta["tensor_specs"].is_object())
    throwBadInput(metaPath, "has no tensor_specs object");

  // An AsyncCheckpointer save's step (metadata.json and every rank file say the same when whole).
  std::optional<std::int64_t> saveStep;
  if (meta.contains("save_step")) {
    if (!meta["save_step"].is_number_integer()) throwBadInput(metaPath, "save_step must be an integer");
    saveStep = meta["save_step"].get<std::int64_t>();
  }

  std::map<std::string, Spec> specs;  // name order
  for (const auto& [name, v] : meta["tensor_specs"].items())
    specs.emplace(name, parseSpec(name, v, numRanks, metaPath, info.problems));

  // Rank files present on disk, to report extra ones.
  std::error_code ec;
  for (const auto& entry : remote ? fs::directory_iterator() : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank_", 0) != 0 || name.size() <= 17 ||
        name.compare(name.size() - 12, 12, ".safetensors") != 0)
      continue;
    const std::string digits = name.substr(5, name.size() - 17);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (digits.size() > 7 || std::stoi(digits) >= numRanks)
      info.problems.push_back(name + " is extra: metadata.json says num_ranks " + std::to_string(numRanks));
  }

  std::optional<std::pair<std::string, std::string>> firstStep;  // a rank file's step, when metadata.json has none
  std::vector<std::optional<RankFile>> ranks(numRanks);
  std::vector<std::optional<HfShard>> remoteRanks(remote ? numRanks : 0);
  if (remote)
    forEachInParallel(numRanks, 8, [&](std::int64_t r) {
      try {
        remoteRanks[static_cast<std::size_t>(r)] = remoteSafetensorsHeader(folder + "rank_" + std::to_string(r) + ".safetensors");
      } catch (const Error& e) {
        if (!isNotFound(e)) throw;  // a rank the server does not have is a problem of the layout
      }
    });
  for (int r = 0; r < numRanks; ++r) {
    const std::string path = remote ? folder + "rank_" + std::to_string(r) + ".safetensors"
                                    : (root / ("rank_" + std::to_string(r) + ".safetensors")).string();
    if (remote ? !remoteRanks[r] : !fileExists(path)) {
      info.problems.push_back("rank_" + std::to_string(r) + ".safetensors is missing (num_ranks " +
                              std::to_string(numRanks) + ")");
      continue;
    }
    RankFile& file = ranks[r].emplace();
    if (remote) {
      file.header = std::move(remoteRanks[r]->header);
      file.index = addFile(info, path, remoteRanks[r]->remote);
    } else {
      file.header = SafetensorsFile::open(path).header();
      file.index = addFile(info, path);
    }
    for (const auto& e : file.header.tensors) file.byName.emplace(e.name, &e);
    checkSaveStep(file.header, "rank_" + std::to_string(r) + ".safetensors", saveStep, firstStep, info.problems);
    for (const auto& e : file.header.tensors)
      if (!specs.count(e.name))
        info.problems.push_back("rank_" + std::to_string(r) + ".safetensors holds tensor \"" + e.name +
                                "\", which metadata.json does not list");
  }

  for (const auto& [name, spec] : specs) {
    LogicalTensor t;
    t.name = name;
    t.shape = spec.fullShape;
    t.shardDim = spec.shardDim;
    t.shardSizes = spec.shardSizes;
    bool ok = true, dtypeKnown = false;
    int dtypeRank = 0;
    std::int64_t offset = 0;
    const bool sizesUsable = !spec.shardDim || spec.shardSizes.size() == static_cast<std::size_t>(numRanks);
    for (int r = 0; r < numRanks; ++r) {
      if (!ranks[r]) {
        ok = false;
        continue;
      }
      const SafetensorsEntry* e = ranks[r]->find(name);
      const std::string rankName = "rank " + std::to_string(r);
      if (!e) {
        info.problems.push_back("tensor \"" + name + "\" is missing on " + rankName);
        ok = false;
        continue;
      }
      if (!dtypeKnown) {
        t.dtype = e->dtype;
        dtypeKnown = true;
        dtypeRank = r;
      } else if (e->dtype != t.dtype) {
        info.problems.push_back("tensor \"" + name + "\" is " + std::string(dtypeName(t.dtype)) + " on rank " +
                                std::to_string(dtypeRank) + " but " + std::string(dtypeName(e->dtype)) +
                                " on " + rankName);
        ok = false;
      }
      std::vector<std::int64_t> expected = spec.fullShape;
      if (spec.shardDim && sizesUsable) expected[*spec.shardDim] = spec.shardSizes[r];
      if (sizesUsable && e->shape != expected) {
        info.problems.push_back("tensor \"" + name + "\" on " + rankName + " has shape " + shapeText(e->shape) +
                                ", expected " + shapeText(expected) +
                                (spec.shardDim ? " (full " + shapeText(spec.fullShape) + " split on dim " +
                                                     std::to_string(*spec.shardDim) + ")"
                                               : " (replicated)"));
        ok = false;
      }
      if (!ok || !sizesUsable) continue;
      if (spec.shardDim) {
        TensorPiece p = wholeTensorPiece(ranks[r]->index, ranks[r]->header, *e);
        p.start[*spec.shardDim] = offset;
        offset += spec.shardSizes[r];
        t.pieces.push_back(std::move(p));
      } else {
        // Every rank holds it whole: the first copy is read, the others are kept for verify.
        (t.pieces.empty() ? t.pieces : t.replicas).push_back(wholeTensorPiece(ranks[r]->index, ranks[r]->header, *e));
      }
    }
    const bool sumOk = !spec.shardDim || offset == spec.fullShape[*spec.shardDim];
    if (!ok || !sizesUsable || !sumOk) t.pieces.clear(), t.replicas.clear();
    std::uint64_t elements = 1;
    bool overflow = false;
    for (auto d : t.shape) overflow |= __builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements);
    if (overflow) throwBadInput(metaPath, "tensor \"" + name + "\": full_shape " + shapeText(t.shape) + " overflows");
    t.nbytes = dtypeBytesFor(t.dtype, elements).value_or(0);
    info.tensors.push_back(std::move(t));
  }
}

}  // namespace stoker
