// The option sets whose exported C++ snippets tst_loader_options compiles and
// runs: snippet_gen writes each case's exportCppSnippet() at build time (its
// functions renamed per case), and the test checks that stokerOptions_<case>()
// rebuilds exactly these options and that feedEpochs_<case>() runs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "data/loader_options.h"

// X(name, options JSON)
// (Each line of a JSON text is its own literal: a raw string must not span a
// macro's line splices. A ')' right before a '"' would end the raw string: the transforms text
// ends in a space.)
#define STOKER_SNIPPET_CASES(X)                                                                              \
  X(defaults, R"({})")                                                                                       \
  X(tuned, R"({"batch_size": 6, "num_workers": 3, "prefetch": 9, "drop_last": false, )"                     \
           R"("seed": 18446744073709551615, "loading_mode": "streaming", "reader_mode": "read", )"          \
           R"("part_size": 65536, "max_inflight_parts": 2, "pin_memory": false, )"                          \
           R"("cache_dir": "stoker-parts", "cache_limit": 1000000, )"                                       \
           R"("persistent_workers": false, "timeout": 2.5, "memory_format": "nhwc", "non_blocking": false, )" \
           R"("generator_seed": 7, "enable_transforms": true, "collate_buffer_size": 5, )"                  \
           R"("vram_max_usage": 0.55, "reuse_buffers": true, "telemetry_interval_ms": 100, "worker_id": 3, )" \
           R"("auto_tune": false, "multiprocessing_context": "spawn", )"                                    \
           R"("transforms": "Resize((8, 8)), ToDtype(u8) ", "normalize_on": "device", "skip_bad_samples": true})")           \
  X(distributed, R"({"batch_size": 4, "sampler_type": "distributed", "shard_rank": 1, )"                    \
                 R"("shard_world_size": 3, "shuffle": false})")                                              \
  X(weighted, R"({"batch_size": 5, "sampler_type": "weighted", "num_samples": 33, "num_workers": 0})")

namespace stoker::test {

constexpr std::int64_t kSnippetSamples = 40;  // the dataset the snippets run on

// The case's options; a weighted case gets one weight per sample.
inline LoaderOptions snippetCaseOptions(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json);
  if (j.value("sampler_type", "") == "weighted")
    for (std::int64_t i = 0; i < kSnippetSamples; ++i) j["weights"].push_back(0.5 + static_cast<double>(i % 3) / 3.0);
  return loaderOptionsFromJson(j.dump(), "snippet case");
}

}  // namespace stoker::test
