// ckpt/convert: executes a reshard plan. Streams every output through a
// bounded memory budget with several jobs, writes each file under a temporary
// name and renames it only after fsync, journals finished files so --resume
// (or a cooperating process) never redoes them, and writes the index
// (metadata.json / model.safetensors.index.json) last, once all files exist.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/dtype_convert.h"
#include "ckpt/reshard_plan.h"

namespace stoker {

class CancelToken;
class ProgressSink;

struct ConvertOptions {
  std::uint64_t memoryBudget = 256ull << 20;
  int jobs = 1;
  bool resume = false;  // finish a conversion DST's journal describes
  bool force = false;   // replace checkpoint files already in DST
  int rank = 0;         // this process writes outputs i with i % worldSize == rank
  int worldSize = 1;
  ProgressSink* progress = nullptr;
  int progressIntervalMs = 50;  // the most often progress is reported
  const CancelToken* cancel = nullptr;
};

struct ConvertReport {
  std::vector<std::string> written;      // by this process, this run
  std::vector<std::string> alreadyDone;  // found finished in the journal
  std::vector<std::string> leftToOthers; // other ranks' share, not finished yet
  bool indexWritten = false;
  bool complete = false;                 // every output and the index are in place
  std::vector<std::pair<std::string, F16Overflow>> f16Overflows;  // per tensor, summed over files
  std::uint64_t bytesWritten = 0;
  double seconds = 0;
};

// Everything is validated before the first byte lands in DST: options, memory
// needs, DST inside SRC, DST existing (needs --force, --resume or a matching
// journal from a cooperating process). Throws Error(BadInput) for those,
// Error(Io) for system failures (the journal stays resumable) and
// Error(Cancelled) when the token fires (finished files stay, partial ones go).
ConvertReport convertCheckpoint(const CheckpointInfo& source, const ReshardPlan& plan, const std::string& dst,
                                const ConvertOptions& options);

// The number of jobs when the user gives none: the cores (at least 2), and for conversions that
// only move bytes (I/O-bound) up to 4 output files at once even on fewer cores -- writing several
// files keeps the disk's queue full (1 GiB x 4, 8 -> 3 ranks on 2 cores: 3 jobs 1.3x faster than 2).
// Never more than `memoryBudget` has room for.
int defaultConvertJobs(const ReshardPlan& plan, std::uint64_t memoryBudget);

// The option and memory checks convertCheckpoint starts with (for --dry-run).
void validateConvertOptions(const ReshardPlan& plan, const ConvertOptions& options);

// Whether executing `plan` needs libtorch (ckpt/torch_ops): a dtype change, a .pt or DCP output.
bool conversionNeedsLibtorch(const ReshardPlan& plan);

// Bytes of memory a job uses for buffers, given the budget (for the plan view).
std::uint64_t perJobBufferBytes(const ConvertOptions& options);

}  // namespace stoker
