// data/datasets/dataset_spec: the "kind:PATH,key=value,..." specs of file datasets, split once.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace stoker {

struct DatasetSpec {
  std::string kind;  // "tokens"
  std::string path;  // what follows "kind:" up to the first ",key="
  std::map<std::string, std::string> options;

  // Parses `spec` ("tokens:/data/train.bin,ctx=1024"); keys must be among `known` (comma-separated
  // in the error). Throws Error(BadInput) naming the spec.
  static DatasetSpec parse(const std::string& spec, const std::string& kind, const std::string& known);
  // Where the path ends in what follows "kind:": a path may hold commas, options start at the
  // first ",key=" whose key is a word. npos when there are no options.
  static std::size_t pathEnd(const std::string& rest);
  // The value of `key` as an integer in [lo, hi], or `fallback` when absent.
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const;
  std::string text;  // the whole spec, for errors
};

}  // namespace stoker
