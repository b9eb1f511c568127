// Fuzz target: model.safetensors.index.json of the Hugging Face sharded layout, next to two
// valid shards (model-00001-of-00002.safetensors: a F32 [2,3], b F32 [3];
// model-00002-of-00002.safetensors: c F16 [4]).
#include "ckpt/inspect.h"
#include "fuzz_checkpoint.h"
#include "fuzz_target.h"

using stoker::fuzz::safetensorsBytes;

STOKER_FUZZ_TARGET(hf_index) {
  stoker::fuzz::checkpointFolder(
      "hf", {{"model-00001-of-00002.safetensors",
              safetensorsBytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                               R"("b":{"dtype":"F32","shape":[3],"data_offsets":[24,36]}})", 36)},
             {"model-00002-of-00002.safetensors",
              safetensorsBytes(R"({"c":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", 8)}});
  const std::string index = stoker::fuzz::writeScratchFile("hf/model.safetensors.index.json", data, size);
  stoker::fuzz::checkAcceptedCheckpoint(stoker::inspectCheckpoint(index));
}
