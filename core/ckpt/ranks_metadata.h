// ckpt/ranks_metadata: metadata.json of the ranks layout, byte for byte what
// the seed (ferrotorch) writes: serde_json::to_string_pretty of
// {"num_ranks", "tensor_specs": {name: {"full_shape", "shard_dim", "shard_sizes"}}}.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stoker {

struct ShardSpec {
  std::vector<std::int64_t> fullShape;
  std::optional<int> shardDim;            // none: every rank holds the tensor whole
  std::vector<std::int64_t> shardSizes;   // per rank along shardDim
};
using ShardSpecs = std::map<std::string, ShardSpec>;

// `saveStep` (AsyncCheckpointer): the save this metadata belongs to, stamped into every rank file's
// __metadata__ too (kSaveStepKey), so that a reader refuses ranks of different saves.
std::string ranksMetadataJson(int numRanks, const ShardSpecs& specs, std::optional<std::int64_t> saveStep = std::nullopt);
inline constexpr const char* kSaveStepKey = "stoker_save_step";

// Every tensor split along `dim` (scalars replicated) by the seed's even rule.
ShardSpecs evenShardSpecs(const std::map<std::string, std::vector<std::int64_t>>& fullShapes, int worldSize,
                          int dim = 0);

}  // namespace stoker
