#include "ckpt/reshard_plan.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/ranks_metadata.h"
#include "io/safetensors_writer.h"
#include "util/byte_size.h"
#include "util/error.h"

namespace stoker {

TargetSpec parseTargetSpec(const std::string& to, const std::string& dtype) {
  TargetSpec t;
  const auto colon = to.find(':');
  const std::string kind = to.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : to.substr(colon + 1);
  const bool hasArg = colon != std::string::npos;
  if (kind == "ranks") {
    t.kind = TargetKind::Ranks;
    if (!hasArg || arg.empty() || arg.find_first_not_of("0123456789") != std::string::npos || arg.size() > 6 ||
        std::stoi(arg) < 1)
      throwBadInput("--to " + to, "ranks needs a world size from 1 to 999999, e.g. ranks:4");
    t.ranks = std::stoi(arg);
  } else if (kind == "hf") {
    t.kind = TargetKind::Hf;
    if (hasArg) t.maxShardBytes = parseByteSize(arg, "--to " + to);
    if (t.maxShardBytes == 0) throwBadInput("--to " + to, "the shard size must be positive");
  } else if (kind == "single" && !hasArg) {
    t.kind = TargetKind::Single;
  } else if (kind == "pt" && !hasArg) {
    t.kind = TargetKind::Pt;
  } else if (kind == "dcp") {
    t.kind = TargetKind::Dcp;
    if (hasArg && (arg.empty() || arg.find_first_not_of("0123456789") != std::string::npos || arg.size() > 6 ||
                   std::stoi(arg) < 1))
      throwBadInput("--to " + to, "dcp needs a world size from 1 to 999999, e.g. dcp:4");
    t.ranks = hasArg ? std::stoi(arg) : 1;
  } else {
    throwBadInput("--to " + to, "expected ranks:M, hf, hf:SIZE, single, pt or dcp[:M]");
  }
  if (dtype == "f32") t.dtype = Dtype::F32;
  else if (dtype == "f16") t.dtype = Dtype::F16;
  else if (dtype == "bf16") t.dtype = Dtype::BF16;
  else if (dtype != "keep" && !dtype.empty()) throwBadInput("--dtype " + dtype, "expected keep, f32, f16 or bf16");
  return t;
}

std::string targetName(const TargetSpec& t) {
  std::string s;
  switch (t.kind) {
    case TargetKind::Ranks: s = "ranks:" + std::to_string(t.ranks); break;
    case TargetKind::Hf: s = "hf:" + std::to_string(t.maxShardBytes) + "B"; break;
    case TargetKind::Single: s = "single"; break;
    case TargetKind::Pt: s = "pt"; break;
    case TargetKind::Dcp: s = "dcp:" + std::to_string(t.ranks); break;
  }
  if (t.dtype) s += " dtype " + std::string(dtypeName(*t.dtype));
  return s;
}

std::vector<std::int64_t> evenSplit(std::int64_t total, int parts) {
  std::vector<std::int64_t> sizes(parts, total / parts);
  for (std::int64_t i = 0; i < total % parts; ++i) ++sizes[i];
  return sizes;
}

std::uint64_t PlannedFile::dataBytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.nbytes;
  return n;
}

std::uint64_t ReshardPlan::totalBytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files) n += f.fileBytes;
  return n;
}

std::uint64_t ReshardPlan::largestTensorBytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files)
    for (const auto& t : f.tensors) n = std::max(n, t.nbytes);
  return n;
}

namespace {

bool convertibleFloat(Dtype d) {
  return d == Dtype::F16 || d == Dtype::BF16 || d == Dtype::F32 || d == Dtype::F64;
}

std::uint64_t elementsOf(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out;
  for (std::size_t d = 0; d < a.start.size(); ++d) {
    const std::int64_t lo = std::max(a.start[d], b.start[d]);
    const std::int64_t hi = std::min(a.start[d] + a.shape[d], b.start[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.start.push_back(lo);
    out.shape.push_back(hi - lo);
  }
  return out;
}

PlannedTensor planTensor(const LogicalTensor& src, const Box& box, const TargetSpec& target) {
  PlannedTensor t;
  t.name = src.name;
  t.source = &src;
  t.dtype = target.dtype && convertibleFloat(src.dtype) ? *target.dtype : src.dtype;
  t.box = box;
  const auto bytes = dtypeBytesFor(t.dtype, elementsOf(box.shape));
  if (!bytes) throwBadInput(src.name, "too large in " + std::string(dtypeName(t.dtype)));
  t.nbytes = *bytes;
  if (elementsOf(box.shape) == 0) return t;
  for (const auto& piece : src.pieces) {
    if (auto common = intersect(box, Box{piece.start, piece.shape}))
      t.segments.push_back({&piece, *common});
  }
  if (dtypeBits(src.dtype) % 8 != 0) {
    const bool whole = t.segments.size() == 1 && t.segments[0].box.shape == t.segments[0].piece->shape &&
                       box.shape == src.shape;
    if (!whole)
      throwBadInput("tensor \"" + src.name + "\"", std::string(dtypeName(src.dtype)) +
                                                     " packs several values per byte and cannot be split or merged");
  }
  return t;
}

Box wholeBox(const LogicalTensor& t) {
  return Box{std::vector<std::int64_t>(t.shape.size(), 0), t.shape};
}

void finishSafetensorsFile(PlannedFile& f) {
  std::vector<TensorSpec> specs;
  for (const auto& t : f.tensors) specs.push_back({t.name, t.dtype, t.box.shape});
  f.fileBytes = planSafetensorsLayout(std::move(specs), f.metadata).fileSize();
}

std::string shardName(std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

ReshardPlan planReshard(const CheckpointInfo& source, const TargetSpec& target) {
  std::vector<const LogicalTensor*> tensors;
  for (const auto& t : source.tensors) tensors.push_back(&t);
  std::sort(tensors.begin(), tensors.end(),
            [](const LogicalTensor* a, const LogicalTensor* b) { return a->name < b->name; });

  std::map<std::string, std::string> fileMetadata;
  if (source.format == CheckpointFormat::Safetensors) fileMetadata = source.metadata;
  if (!fileMetadata.count("format")) fileMetadata["format"] = "pt";  // what transformers expects

  ReshardPlan plan;
  plan.target = target;
  switch (target.kind) {
    case TargetKind::Ranks: {
      ShardSpecs specs;
      plan.files.resize(target.ranks);
      for (int r = 0; r < target.ranks; ++r) plan.files[r].name = "rank_" + std::to_string(r) + ".safetensors";
      for (const LogicalTensor* t : tensors) {
        std::optional<int> dim = t->shardDim;
        if (source.format != CheckpointFormat::Ranks && !t->shape.empty()) dim = 0;
        std::vector<std::int64_t> sizes;
        if (dim) sizes = evenSplit(t->shape[*dim], target.ranks);
        std::int64_t offset = 0;
        for (int r = 0; r < target.ranks; ++r) {
          Box box = wholeBox(*t);
          if (dim) {
            box.start[*dim] = offset;
            box.shape[*dim] = sizes[r];
            offset += sizes[r];
          }
          plan.files[r].tensors.push_back(planTensor(*t, box, target));
        }
        specs[t->name] = ShardSpec{t->shape, dim, sizes};
      }
      plan.indexName = "metadata.json";
      plan.indexContent = ranksMetadataJson(target.ranks, specs);
      break;
    }
    case TargetKind::Hf: {
      // transformers' greedy packing: start a new shard when the next tensor
      // would push the current one over the limit (a huge tensor sits alone).
      std::vector<std::vector<PlannedTensor>> shards;
      std::uint64_t current = 0;
      for (const LogicalTensor* t : tensors) {
        PlannedTensor p = planTensor(*t, wholeBox(*t), target);
        if (shards.empty() || (current + p.nbytes > target.maxShardBytes && !shards.back().empty())) {
          shards.emplace_back();
          current = 0;
        }
        current += p.nbytes;
        shards.back().push_back(std::move(p));
      }
      if (shards.empty()) shards.emplace_back();
      nlohmann::json weightMap = nlohmann::json::object();
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < shards.size(); ++i) {
        PlannedFile f;
        f.name = shards.size() == 1 ? "model.safetensors" : shardName(i, shards.size());
        f.metadata = {{"format", "pt"}};
        f.tensors = std::move(shards[i]);
        for (const auto& t : f.tensors) {
          weightMap[t.name] = f.name;
          total += t.nbytes;
        }
        plan.files.push_back(std::move(f));
      }
      if (plan.files.size() > 1) {
        nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}};
        plan.indexName = "model.safetensors.index.json";
        plan.indexContent = index.dump(2) + "\n";  // json.dumps(indent=2, sort_keys=True) + "\n"
      }
      break;
    }
    case TargetKind::Dcp: {
      // FSDP's layout: every tensor split on dim 0 by the even rule, one file per rank; a rank
      // whose share is empty holds no chunk, and a scalar is held once, by rank 0 (DCP keys
      // items by (name, chunk offsets), so a tensor has each chunk once).
      plan.files.resize(target.ranks);
      for (int r = 0; r < target.ranks; ++r) plan.files[r].name = "__" + std::to_string(r) + "_0.distcp";
      for (const LogicalTensor* t : tensors) {
        if (t->shape.empty() || t->shape[0] == 0) {
          plan.files[0].tensors.push_back(planTensor(*t, wholeBox(*t), target));
          continue;
        }
        const std::vector<std::int64_t> sizes = evenSplit(t->shape[0], target.ranks);
        std::int64_t offset = 0;
        for (int r = 0; r < target.ranks; ++r) {
          if (sizes[r] == 0) continue;
          Box box = wholeBox(*t);
          box.start[0] = offset;
          box.shape[0] = sizes[r];
          offset += sizes[r];
          plan.files[r].tensors.push_back(planTensor(*t, box, target));
        }
      }
      plan.indexName = ".metadata";
      plan.indexFromItems = true;
      plan.bytesItems = source.nonTensorItems;
      break;
    }
    case TargetKind::Single:
    case TargetKind::Pt: {
      PlannedFile f;
      f.name = target.kind == TargetKind::Pt ? "model.pt" : "model.safetensors";
      if (target.kind == TargetKind::Single) f.metadata = fileMetadata;
      for (const LogicalTensor* t : tensors) f.tensors.push_back(planTensor(*t, wholeBox(*t), target));
      plan.files.push_back(std::move(f));
      break;
    }
  }
  for (auto& f : plan.files) {
    if (target.kind == TargetKind::Pt || target.kind == TargetKind::Dcp)
      f.fileBytes = f.dataBytes();  // plus the zip directories, known once written
    else
      finishSafetensorsFile(f);
  }
  if (!plan.files.empty())
    for (const auto& i : plan.bytesItems) plan.files.front().fileBytes += i.bytes;
  return plan;
}

// --- RunCursor ----------------------------------------------------------------

RunCursor::RunCursor(const PlannedTensor& t) : t_(t) {
  const int bits = dtypeBits(t.source->dtype);
  elemBytes_ = bits % 8 == 0 ? static_cast<std::uint64_t>(bits / 8) : 0;
  for (const auto& seg : t.segments) {
    SegmentState s{&seg, 0, 0, {}, 0, 0, false};
    const auto& S = seg.box.shape;
    const auto& P = seg.piece->shape;
    const auto& D = t.box.shape;
    const int n = static_cast<int>(S.size());
    if (elemBytes_ == 0) {  // sub-byte dtype: planTensor allowed only whole copies
      s.runBytes = t.source->nbytes;
    } else if (n == 0) {
      s.runBytes = elemBytes_;
    } else {
      int k = n - 1;
      while (k > 0 && S[k] == P[k] && S[k] == D[k]) --k;
      s.innerDim = k;
      std::uint64_t run = elemBytes_;
      for (int d = k; d < n; ++d) run *= static_cast<std::uint64_t>(S[d]);
      s.runBytes = run;
      s.index.assign(k, 0);
    }
    s.dstOffset = dstOffsetOf(s);
    s.srcOffset = srcOffsetOf(s);
    states_.push_back(std::move(s));
  }
}

// Byte offset of the segment's current run inside a row-major block that
// starts at `origin` with extent `extent` (the output box or the source piece).
std::uint64_t RunCursor::offsetIn(const std::vector<std::int64_t>& origin, const std::vector<std::int64_t>& extent,
                                  const SegmentState& s) const {
  if (elemBytes_ == 0) return 0;
  std::uint64_t offset = 0, stride = elemBytes_;
  for (std::size_t d = extent.size(); d-- > 0;) {
    std::int64_t pos = s.seg->box.start[d] - origin[d] + (d < s.index.size() ? s.index[d] : 0);
    offset += static_cast<std::uint64_t>(pos) * stride;
    stride *= static_cast<std::uint64_t>(extent[d]);
  }
  return offset;
}

std::uint64_t RunCursor::dstOffsetOf(const SegmentState& s) const { return offsetIn(t_.box.start, t_.box.shape, s); }

std::uint64_t RunCursor::srcOffsetOf(const SegmentState& s) const {
  return offsetIn(s.seg->piece->start, s.seg->piece->shape, s);
}

void RunCursor::advance(SegmentState& s) {
  for (std::size_t d = s.index.size(); d-- > 0;) {
    if (++s.index[d] < s.seg->box.shape[d]) {
      s.dstOffset = dstOffsetOf(s);
      s.srcOffset = srcOffsetOf(s);
      return;
    }
    s.index[d] = 0;
  }
  s.done = true;
}

bool RunCursor::next(CopyRun& run) {
  SegmentState* best = nullptr;
  for (auto& s : states_)
    if (!s.done && (!best || s.dstOffset < best->dstOffset)) best = &s;
  if (!best) return false;
  run.piece = best->seg->piece;
  run.pieceOffset = best->srcOffset;
  run.length = best->runBytes;
  advance(*best);
  return true;
}

std::uint64_t RunCursor::runCount() const {
  std::uint64_t n = 0;
  for (const auto& s : states_) {
    std::uint64_t c = 1;
    for (int d = 0; d < s.innerDim; ++d) c *= static_cast<std::uint64_t>(s.seg->box.shape[d]);
    n += c;
  }
  return n;
}

}  // namespace stoker
