// Fuzz target: .pt files (torch.save's zip: data.pkl through the restricted unpickler, storage
// records through libtorch's zip reader), every tensor listed, located and loaded.
#include "ckpt/inspect.h"
#include "fuzz_target.h"
#include "io/pt_file.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(pt) {
  const std::string path = stoker::fuzz::writeScratchFile("input.pt", data, size);
  const stoker::PtFile file = stoker::PtFile::open(path);
  for (const auto& info : file.tensors()) {
    if (info.nbytes() > (64u << 20)) continue;  // a valid but big claim; loading it only costs time
    const stoker::HostTensor t = file.load(info);
    check(t.nbytes == info.nbytes(), "a loaded tensor has the size its header promised");
    if (auto at = file.inPlaceOffset(info)) check(*at + t.nbytes <= size, "in-place bytes lie inside the file");
  }
  // The checkpoint view of the same file: pieces and problems.
  (void)stoker::inspectCheckpoint(path);
}
