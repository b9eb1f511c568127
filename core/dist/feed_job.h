// dist/feed_job: a rank of a multi-process job feeding its device with the
// planner's share of every epoch -- what `stoker feed` runs and what a
// training program can call with its own step. Ranks agree on the plan
// (digests compared through c10d), exchange step times every step (El Che
// counts are computed from them identically on every rank), and rank 0
// records the committed progress after each step, so a job killed mid-epoch
// restarts -- on any world size -- after the last committed step with no
// sample repeated or skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader.h"

namespace stoker {

class DistGroup;

struct FeedJobOptions {
  std::int64_t epochs = 1;
  std::int64_t batchSize = 64;
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool dropLast = false;
  std::vector<double> weights;  // per-rank chunk ratios (unequal GPUs)
  bool elChe = false;           // per-rank batch counts from exchanged step times
  std::int64_t anchorBatches = 4;
  std::string progressFile;     // rank 0 writes {"epoch", "consumed", ...} after each step
  bool resume = false;          // continue from progressFile
  std::string recordDir;        // each rank appends "epoch step consumed idx..." lines
};

// Progress of the job: `consumed` samples of epoch `epoch`'s order are done.
struct FeedProgress {
  std::int64_t samples = 0;
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t consumed = 0;
  int worldSize = 1;
  // What else decides the order a count of consumed samples refers to (absent in files written
  // before them): a resume with another shuffle, or over another dataset of the same size, skipped
  // places of another order, losing some samples and repeating others.
  std::optional<bool> shuffle;
  std::optional<std::string> dataset;  // the dataset's description
};
// Throws Error(BadInput) naming the file for a missing or malformed file.
FeedProgress readFeedProgress(const std::string& path);
void writeFeedProgress(const std::string& path, const FeedProgress& p);

struct FeedEpochReport {
  std::int64_t epoch = 0;
  std::int64_t resumeFrom = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;  // this rank's, padding included
  std::int64_t padding = 0;
  std::string planDigest;    // equal on every rank (checked)
  std::vector<std::int64_t> elCheCounts;  // El Che counts after the last exchange (before the end-of-epoch clamp)
  double seconds = 0;  // this rank's wall time for the epoch, from its plan to its last step
};

// `step` is the training step on the rank's batches of one step (El Che:
// one round); the job times it and exchanges the times.
using FeedStep = std::function<void(const std::vector<Batch>& batches)>;

// Runs the epochs. `group` may be null for a single process. Throws
// Error(BadInput) for bad options or a progress file of another job,
// Error(Internal) when ranks disagree on the plan, Error(Io/Timeout) when a
// peer dies.
std::vector<FeedEpochReport> runFeedJob(Loader& loader, DistGroup* group, const FeedJobOptions& options,
                                        const FeedStep& step);

}  // namespace stoker
