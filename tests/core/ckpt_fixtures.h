// ckpt_fixtures: writing checkpoints in every layout from libtorch tensors,
// and reading them back to full tensors by a route independent of the
// reshard engine (plain concatenation of what the files hold).
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stoker::test {

using TensorMap = std::map<std::string, at::Tensor>;

struct RankSplit {
  std::optional<int> dim;            // none: replicated
  std::vector<std::int64_t> sizes;   // empty: the seed's even split
};

// DIR/rank_<r>.safetensors + DIR/metadata.json.
void writeRanks(const std::string& dir, const TensorMap& full, int ranks,
                const std::map<std::string, RankSplit>& splits = {});
// DIR/model.safetensors.
void writeSingle(const std::string& dir, const TensorMap& full);

// Full tensors of a checkpoint in any layout, by concatenating rank files
// (metadata.json), gathering HF shards (index), or reading one file.
TensorMap readFull(const std::string& path);

// A mixed model: several dtypes, ranks 0 to 3, a zero-size and an odd-shaped tensor.
TensorMap sampleModel(int seed = 0);

// Exact equality of names, dtypes, shapes and bytes; describes the first difference.
std::string differences(const TensorMap& a, const TensorMap& b);

}  // namespace stoker::test
