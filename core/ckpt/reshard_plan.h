// ckpt/reshard_plan: which bytes of which source files make each output file.
// Every output tensor is a box of a logical tensor; intersecting it with the
// source pieces' boxes (n-dimensional, as torch.distributed.checkpoint's
// resharding does) gives copy segments, and each segment is a sequence of
// contiguous byte runs. Any N -> M, uneven on either side, any split dim.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/inspect.h"

namespace stoker {

enum class TargetKind { Ranks, Hf, Single, Pt, Dcp };

struct TargetSpec {
  TargetKind kind = TargetKind::Single;
  int ranks = 1;                                  // Ranks, Dcp
  std::uint64_t maxShardBytes = 5'000'000'000;    // Hf (transformers' default "5GB")
  std::optional<Dtype> dtype;                     // floating tensors converted to this
};

// "ranks:M", "hf", "hf:SIZE", "single", "pt", "dcp[:M]"; dtype "keep", "f32", "f16", "bf16".
TargetSpec parseTargetSpec(const std::string& to, const std::string& dtype);
std::string targetName(const TargetSpec& t);

// The even split rule of the seed: the first `total % parts` parts get one more.
std::vector<std::int64_t> evenSplit(std::int64_t total, int parts);

struct Box {
  std::vector<std::int64_t> start, shape;
};

// One source piece's share of one output tensor.
struct CopySegment {
  const TensorPiece* piece = nullptr;
  Box box;  // in logical coordinates
};

struct PlannedTensor {
  std::string name;        // name in the output file
  const LogicalTensor* source = nullptr;
  Dtype dtype = Dtype::F32;  // output dtype
  Box box;                 // the part of the logical tensor this output holds
  std::vector<CopySegment> segments;  // tile `box` exactly
  std::uint64_t nbytes = 0;           // output bytes
  bool converts() const { return dtype != source->dtype; }
};

struct PlannedFile {
  std::string name;                   // relative to DST
  std::vector<PlannedTensor> tensors;
  std::map<std::string, std::string> metadata;  // safetensors __metadata__
  std::uint64_t fileBytes = 0;        // the exact size the file will have
  std::uint64_t dataBytes() const;
};

struct ReshardPlan {
  TargetSpec target;
  std::vector<PlannedFile> files;
  std::string indexName;     // metadata.json / model.safetensors.index.json / .metadata, or empty
  std::string indexContent;  // written last, once every file is in place
  // DCP: the .metadata records where each item landed, known only once the files are written;
  // it is built then from what each file's writer logged (ckpt/dcp_writer).
  bool indexFromItems = false;
  // DCP from DCP: the source's non-tensor items, copied byte for byte into the first file.
  std::vector<CheckpointInfo::Item> bytesItems;
  std::uint64_t totalBytes() const;  // sum of file sizes
  std::uint64_t largestTensorBytes() const;
};

// Throws Error(BadInput) for layouts it cannot produce (e.g. splitting a
// sub-byte F4 tensor). The source must be consistent (requireConsistent).
ReshardPlan planReshard(const CheckpointInfo& source, const TargetSpec& target);

// A contiguous run of source bytes and where it lands in the output tensor.
struct CopyRun {
  const TensorPiece* piece = nullptr;
  std::uint64_t pieceOffset = 0;  // bytes from the start of the piece
  std::uint64_t length = 0;       // source bytes
};

// Yields a planned tensor's runs in output byte order, lazily (a tensor split
// along its last dimension has one run per row; they are never all in memory).
class RunCursor {
 public:
  explicit RunCursor(const PlannedTensor& t);
  bool next(CopyRun& run);
  std::uint64_t runCount() const;  // without generating them

 private:
  struct SegmentState {
    const CopySegment* seg;
    int innerDim;                     // dims >= innerDim form one contiguous run
    std::uint64_t runBytes;
    std::vector<std::int64_t> index;  // position over dims < innerDim
    std::uint64_t dstOffset, srcOffset;
    bool done;
  };
  void advance(SegmentState& s);
  std::uint64_t offsetIn(const std::vector<std::int64_t>& origin, const std::vector<std::int64_t>& extent,
                         const SegmentState& s) const;
  std::uint64_t dstOffsetOf(const SegmentState& s) const;
  std::uint64_t srcOffsetOf(const SegmentState& s) const;

  const PlannedTensor& t_;
  std::uint64_t elemBytes_;
  std::vector<SegmentState> states_;
};

}  // namespace stoker
