// ckpt/select: keep only the tensors a user asked for (`--include` / `--exclude`
// shell globs on the tensor name, `*` crossing dots: 'optim.*', '*.bias').
#pragma once

#include <string>
#include <vector>

#include "ckpt/inspect.h"

namespace stoker {

// Keeps tensors (and non-tensor items) matching any include glob (all when none
// are given) and no exclude glob. Throws Error(BadInput) when nothing is left.
void selectTensors(CheckpointInfo& info, const std::vector<std::string>& includes,
                   const std::vector<std::string>& excludes);

}  // namespace stoker
