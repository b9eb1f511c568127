#include "ckpt/ranks_metadata.h"

#include <nlohmann/json.hpp>

#include "ckpt/reshard_plan.h"

namespace stoker {

std::string ranksMetadataJson(int numRanks, const ShardSpecs& specs, std::optional<std::int64_t> saveStep) {
  nlohmann::json tensorSpecs = nlohmann::json::object();
  for (const auto& [name, s] : specs)
    tensorSpecs[name] = {{"full_shape", s.fullShape},
                         {"shard_dim", s.shardDim ? nlohmann::json(*s.shardDim) : nlohmann::json(nullptr)},
                         {"shard_sizes", s.shardSizes}};
  // nlohmann orders keys alphabetically, which is also the seed's field order.
  nlohmann::json meta = {{"num_ranks", numRanks}, {"tensor_specs", tensorSpecs}};
  if (saveStep) meta["save_step"] = *saveStep;
  return meta.dump(2);
}

ShardSpecs evenShardSpecs(const std::map<std::string, std::vector<std::int64_t>>& fullShapes, int worldSize,
                          int dim) {
  ShardSpecs specs;
  for (const auto& [name, shape] : fullShapes) {
    ShardSpec s;
    s.fullShape = shape;
    if (dim < static_cast<int>(shape.size())) {
      s.shardDim = dim;
      s.shardSizes = evenSplit(shape[dim], worldSize);
    }
    specs[name] = s;
  }
  return specs;
}

}  // namespace stoker
