#include "ckpt/select.h"

#include <fnmatch.h>

#include <algorithm>

#include "util/error.h"

namespace stoker {

void selectTensors(CheckpointInfo& info, const std::vector<std::string>& includes,
                   const std::vector<std::string>& excludes) {
  if (includes.empty() && excludes.empty()) return;
  auto any = [](const std::vector<std::string>& globs, const std::string& name) {
    return std::any_of(globs.begin(), globs.end(),
                       [&](const std::string& g) { return ::fnmatch(g.c_str(), name.c_str(), 0) == 0; });
  };
  auto dropped = [&](const std::string& name) {
    return (!includes.empty() && !any(includes, name)) || any(excludes, name);
  };
  const std::size_t before = info.tensors.size();
  info.tensors.erase(std::remove_if(info.tensors.begin(), info.tensors.end(),
                                    [&](const LogicalTensor& t) { return dropped(t.name); }),
                     info.tensors.end());
  info.nonTensorItems.erase(std::remove_if(info.nonTensorItems.begin(), info.nonTensorItems.end(),
                                           [&](const CheckpointInfo::Item& i) { return dropped(i.name); }),
                            info.nonTensorItems.end());
  if (info.tensors.empty())
    throwBadInput("--include/--exclude", "select none of the " + std::to_string(before) + " tensors of " + info.path);
}

}  // namespace stoker
