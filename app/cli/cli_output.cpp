#include "cli_output.h"

#include <algorithm>
#include <cstdio>

#include <set>

#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "util/redacted_url.h"

namespace stoker {

nlohmann::json checkpointJson(const CheckpointInfo& info) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : info.tensors) {
    nlohmann::json j = {{"name", t.name}, {"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape},
                        {"nbytes", t.nbytes}};
    if (info.format == CheckpointFormat::Ranks) {
      j["shard_dim"] = t.shardDim ? nlohmann::json(*t.shardDim) : nlohmann::json(nullptr);
      j["shard_sizes"] = t.shardSizes;
    }
    if (info.format == CheckpointFormat::Dcp) {  // DCP's chunks: the boxes each item holds
      nlohmann::json chunks = nlohmann::json::array();
      for (const auto& p : t.pieces)
        chunks.push_back({{"offsets", p.start}, {"sizes", p.shape}, {"file", info.files[p.file]}});
      j["chunks"] = std::move(chunks);
    }
    tensors.push_back(std::move(j));
  }
  nlohmann::json doc;
  doc["format"] = formatName(info.format);
  doc["world_size"] = info.worldSize ? nlohmann::json(*info.worldSize) : nlohmann::json(nullptr);
  doc["tensors"] = std::move(tensors);
  doc["metadata"] = info.metadata;
  doc["total_bytes"] = info.totalBytes();
  doc["files"] = info.files;
  doc["problems"] = info.problems;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : info.nonTensorItems) items.push_back({{"name", i.name}, {"bytes", i.bytes}});
  doc["non_tensor_items"] = std::move(items);
  return doc;
}

// Every JSON document the CLI prints: a dataset spec, a checkpoint's path or its shards' URLs
// may hold a password or a presigned signature, hidden here once for all of them.
void printJson(const nlohmann::json& doc) {
  std::printf("%s\n", redactedUrl(doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)).c_str());
}

void printCheckpointTable(const CheckpointInfo& info) {
  std::size_t nameWidth = 4;
  for (const auto& t : info.tensors) nameWidth = std::max(nameWidth, t.name.size());
  nameWidth = std::min<std::size_t>(nameWidth, 60);
  std::printf("%s: %s, %zu tensors, %s\n", redactedUrl(info.path).c_str(), formatName(info.format).c_str(),
              info.tensors.size(), humanBytes(info.totalBytes()).c_str());
  std::printf("%-*s  %-7s  %-24s  %s\n", static_cast<int>(nameWidth), "name", "dtype", "shape", "size");
  for (const auto& t : info.tensors)
    std::printf("%-*s  %-7s  %-24s  %s\n", static_cast<int>(nameWidth), t.name.c_str(),
                std::string(dtypeName(t.dtype)).c_str(), shapeText(t.shape).c_str(),
                humanBytes(t.nbytes).c_str());
  for (const auto& [k, v] : info.metadata) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
  for (const auto& i : info.nonTensorItems)
    std::printf("non-tensor item %s (%s; a DCP target keeps it, the others leave it out)\n", i.name.c_str(),
                humanBytes(i.bytes).c_str());
  if (info.format == CheckpointFormat::Dcp) {
    bool header = false;
    for (const auto& t : info.tensors) {
      if (t.pieces.size() < 2) continue;
      if (!header) std::printf("chunks:\n");
      header = true;
      std::string boxes;
      for (const auto& p : t.pieces) boxes += (boxes.empty() ? "" : " ") + shapeText(p.start) + "+" + shapeText(p.shape);
      std::printf("  %s: %zu chunks %s\n", t.name.c_str(), t.pieces.size(), boxes.c_str());
    }
  }
  if (info.worldSize) {
    std::printf("split across %d ranks:\n", *info.worldSize);
    for (const auto& t : info.tensors) {
      if (!t.shardDim) {
        std::printf("  %s: replicated\n", t.name.c_str());
        continue;
      }
      std::string sizes;
      for (std::size_t r = 0; r < t.shardSizes.size(); ++r) sizes += (r ? "," : "") + std::to_string(t.shardSizes[r]);
      std::printf("  %s: dim %d sizes %s\n", t.name.c_str(), *t.shardDim, sizes.c_str());
    }
  }
  for (const auto& p : info.problems) std::printf("problem: %s\n", p.c_str());
}

namespace {

struct FilePlanStats {
  std::uint64_t segments = 0, runs = 0, converted = 0;
  std::set<std::string> sources;
};

FilePlanStats statsOf(const CheckpointInfo& source, const PlannedFile& f) {
  FilePlanStats s;
  for (const auto& t : f.tensors) {
    s.segments += t.segments.size();
    s.runs += RunCursor(t).runCount();
    if (t.converts()) ++s.converted;
    for (const auto& seg : t.segments) s.sources.insert(source.files[seg.piece->file]);
  }
  return s;
}

}  // namespace

nlohmann::json planJson(const CheckpointInfo& source, const ReshardPlan& plan, const ConvertOptions& options) {
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.files.size(); ++i) {
    const auto& f = plan.files[i];
    FilePlanStats s = statsOf(source, f);
    files.push_back({{"name", f.name}, {"bytes", f.fileBytes}, {"tensor_bytes", f.dataBytes()},
                     {"tensors", f.tensors.size()}, {"copy_segments", s.segments}, {"byte_runs", s.runs},
                     {"converted_tensors", s.converted}, {"reads", s.sources},
                     {"rank", static_cast<int>(i % static_cast<std::size_t>(options.worldSize))}});
  }
  nlohmann::json doc;
  doc["source"] = source.path;
  doc["source_format"] = formatName(source.format);
  doc["target"] = targetName(plan.target);
  doc["dtype"] = plan.target.dtype ? std::string(dtypeName(*plan.target.dtype)) : std::string("keep");
  doc["files"] = std::move(files);
  doc["index"] = plan.indexName.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan.indexName);
  doc["total_bytes"] = plan.totalBytes();
  doc["memory"] = {{"budget", options.memoryBudget}, {"jobs", options.jobs},
                   {"buffer_per_job", perJobBufferBytes(options)}};
  return doc;
}

void printPlanTable(const CheckpointInfo& source, const ReshardPlan& plan, const ConvertOptions& options) {
  std::printf("plan: %s (%s, %zu tensors) -> %s, %zu file(s), %s\n", redactedUrl(source.path).c_str(),
              formatName(source.format).c_str(), source.tensors.size(), targetName(plan.target).c_str(),
              plan.files.size(), humanBytes(plan.totalBytes()).c_str());
  std::printf("%-36s  %10s  %7s  %8s  %9s  %s\n", "file", "size", "tensors", "segments", "byte runs", "reads");
  for (const auto& f : plan.files) {
    FilePlanStats s = statsOf(source, f);
    std::printf("%-36s  %10s  %7zu  %8llu  %9llu  %zu file(s)\n", f.name.c_str(), humanBytes(f.fileBytes).c_str(),
                f.tensors.size(), static_cast<unsigned long long>(s.segments),
                static_cast<unsigned long long>(s.runs), s.sources.size());
  }
  if (!plan.indexName.empty()) std::printf("%-36s  written last\n", plan.indexName.c_str());
  std::printf("memory: budget %s, %d job(s), %s buffer per job\n", humanBytes(options.memoryBudget).c_str(),
              options.jobs, humanBytes(perJobBufferBytes(options)).c_str());
}

nlohmann::json convertJson(const CheckpointInfo& source, const ReshardPlan& plan, const std::string& dst,
                           const ConvertReport& report) {
  nlohmann::json overflow = nlohmann::json::array();
  for (const auto& [tensor, o] : report.f16Overflows)
    overflow.push_back({{"tensor", tensor}, {"count", o.count}, {"max_abs", o.maxAbs}});
  nlohmann::json doc;
  doc["source"] = source.path;
  doc["destination"] = dst;
  doc["target"] = targetName(plan.target);
  doc["written"] = report.written;
  doc["already_done"] = report.alreadyDone;
  doc["left_to_others"] = report.leftToOthers;
  doc["index_written"] = report.indexWritten;
  doc["complete"] = report.complete;
  doc["bytes_written"] = report.bytesWritten;
  doc["seconds"] = report.seconds;
  doc["bytes_per_s"] = report.seconds > 0 ? static_cast<double>(report.bytesWritten) / report.seconds : 0.0;
  doc["f16_overflow"] = std::move(overflow);
  return doc;
}

void printConvertSummary(const ReshardPlan& plan, const std::string& dst, const ConvertReport& report) {
  const double rate = report.seconds > 0 ? static_cast<double>(report.bytesWritten) / report.seconds : 0;
  std::printf("wrote %zu file(s), %s in %.2f s (%s/s) to %s\n", report.written.size(),
              humanBytes(report.bytesWritten).c_str(), report.seconds,
              humanBytes(static_cast<std::uint64_t>(rate)).c_str(), dst.c_str());
  if (!report.alreadyDone.empty())
    std::printf("%zu file(s) were already finished (resumed)\n", report.alreadyDone.size());
  if (report.complete)
    std::printf("complete: %s%s\n", targetName(plan.target).c_str(),
                report.indexWritten ? (", " + plan.indexName + " written last").c_str() : "");
  else
    std::printf("%zu file(s) left to the other processes; the last one to finish writes %s\n",
                report.leftToOthers.size(), plan.indexName.empty() ? "nothing more" : plan.indexName.c_str());
}

}  // namespace stoker
