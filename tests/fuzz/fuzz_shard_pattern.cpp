// Fuzz target: a wds: SHARDS pattern (brace ranges and lists) as expandShardPattern expands it,
// before any shard is opened. Glob characters are blanked so the file system is not walked.
#include <string>

#include "data/datasets/web_dataset.h"
#include "fuzz_target.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(shard_pattern) {
  std::string pattern(reinterpret_cast<const char*>(data), size);
  for (char& c : pattern)
    if (c == '*' || c == '?' || c == '[') c = '_';
  const auto shards = stoker::expandShardPattern(pattern);
  check(!shards.empty(), "a pattern names at least one shard");
  check(shards.size() <= 1000000, "at most 1,000,000 shards");
  if (pattern.find('{') == std::string::npos) check(shards.size() == 1 && shards[0] == pattern, "no brace: the pattern itself");
}
