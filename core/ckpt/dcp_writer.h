// ckpt/dcp_writer: the `--to dcp[:M]` target. Each rank's file
// `__<r>_0.distcp` holds its chunks as torch.save zips back to back (what
// torch's FileSystemWriter writes); `.metadata` is a pickle of torch 2.x's
// Metadata (classes under torch.distributed.checkpoint, TensorProperties and
// _MEM_FORMAT_ENCODING beside them, as torch >= 2.3 keeps them) that
// `dcp.load` and `dcp_to_torch_save` read. Items' offsets are known only once
// a file is written, so each file's writer logs them in the journal and the
// last process builds `.metadata` from those logs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/reshard_plan.h"
#include "io/host_tensor.h"

namespace stoker {

struct DcpWrittenItem {
  std::string fqn;
  std::uint64_t offset = 0, length = 0;  // in the file
  bool bytes = false;                    // a non-tensor item (BytesStorageMetadata)
};

class SourceFiles;

// Writes `f` to `path` (temp + fsync + rename): first `bytesItems`, copied from `source`'s files
// as they are, then tensor k's item from the bytes `produce(k)` gives.
std::vector<DcpWrittenItem> writeDcpFile(const std::string& path, const PlannedFile& f,
                                         const std::vector<CheckpointInfo::Item>& bytesItems, SourceFiles& source,
                                         const std::function<HostTensor(std::size_t)>& produce);

// The journal's record of one written file, and reading it back.
std::string dcpItemsLog(const std::vector<DcpWrittenItem>& items);
std::vector<DcpWrittenItem> parseDcpItemsLog(const std::string& text, const std::string& subject);
// Where a file's log lives in DST's journal.
std::string dcpItemsLogPath(const std::string& dst, const std::string& file);

// Whether DST holds `plan`'s DCP output, finished: its .metadata lists exactly the planned chunks
// (names, offsets, sizes, dtype) and non-tensor items, each in its planned file, the items of a
// file lie back to back from its first byte to its last, and every tensor item is a torch.save zip
// of its chunk's dtype and size. What --resume trusts when a conversion's journal is already gone.
bool dcpOutputMatchesPlan(const ReshardPlan& plan, const std::string& dst);

// The .metadata pickle for `plan`, given each file's items (by file name).
std::string dcpMetadataPickle(const ReshardPlan& plan,
                              const std::function<std::vector<DcpWrittenItem>(const std::string& file)>& itemsOf);

}  // namespace stoker
