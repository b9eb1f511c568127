// Fuzz target: metadata.json of the ranks layout (ferrotorch's schema), next to two valid rank
// files: rank_0 holds w F32 [2,3] and b F32 [2]; rank_1 holds w F32 [1,3] and b F32 [2].
#include "ckpt/inspect.h"
#include "fuzz_checkpoint.h"
#include "fuzz_target.h"

using stoker::fuzz::safetensorsBytes;

STOKER_FUZZ_TARGET(ranks_metadata) {
  const std::string dir = stoker::fuzz::checkpointFolder(
      "ranks", {{"rank_0.safetensors", safetensorsBytes(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                        R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})", 32)},
                {"rank_1.safetensors", safetensorsBytes(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                        R"("w":{"dtype":"F32","shape":[1,3],"data_offsets":[8,20]}})", 20)}});
  stoker::fuzz::writeScratchFile("ranks/metadata.json", data, size);
  stoker::fuzz::checkAcceptedCheckpoint(stoker::inspectCheckpoint(dir));
}
