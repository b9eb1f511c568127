#include "ckpt/verify.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <set>

#include <xxhash.h>

#include "ckpt/reshard_plan.h"
#include "ckpt/tensor_stream.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

class HashSink : public ByteSink {
 public:
  HashSink() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~HashSink() override { XXH3_freeState(state_); }
  void append(const void* data, std::size_t n) override { XXH3_64bits_update(state_, data, n); }
  std::uint64_t digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

// Hashes the tensors of several checkpoints with a pool of jobs.
void digestInto(const std::vector<const CheckpointInfo*>& infos, std::vector<std::vector<TensorDigest>>& out,
                const VerifyOptions& o) {
  struct Work {
    std::size_t which;
    const PlannedTensor* tensor;
    TensorDigest* digest;
  };
  std::vector<ReshardPlan> plans;
  std::vector<std::unique_ptr<SourceFiles>> files;
  std::vector<Work> work;
  std::uint64_t total = 0;
  out.assign(infos.size(), {});
  plans.reserve(infos.size());
  for (std::size_t k = 0; k < infos.size(); ++k) {
    requireConsistent(*infos[k]);
    plans.push_back(planReshard(*infos[k], TargetSpec{}));  // the logical tensors, whole, in name order
    files.push_back(std::make_unique<SourceFiles>(*infos[k]));
    const auto& tensors = plans.back().files.front().tensors;
    out[k].resize(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      out[k][i] = {tensors[i].name, tensors[i].dtype, tensors[i].box.shape, 0};
      work.push_back({k, &tensors[i], &out[k][i]});
      total += tensors[i].nbytes;
    }
  }
  // Big tensors first keeps the jobs busy to the end.
  std::sort(work.begin(), work.end(), [](const Work& a, const Work& b) { return a.tensor->nbytes > b.tensor->nbytes; });
  ProgressMeter meter(o.progress, total);
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex mutex;
  auto worker = [&] {
    try {
      std::vector<std::unique_ptr<TensorStreamer>> streamers;
      for (auto& f : files) streamers.push_back(std::make_unique<TensorStreamer>(*f, 4 << 20, o.cancel, &meter));
      for (std::size_t i; (i = next++) < work.size();) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (error) return;
        }
        HashSink sink;
        streamers[work[i].which]->stream(*work[i].tensor, sink, nullptr);
        work[i].digest->hash = sink.digest();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
    }
  };
  runJobs(std::max(1, std::min<int>(o.jobs, static_cast<int>(work.size()))), worker);
  meter.finish();
  if (error) std::rethrow_exception(error);
}

// A ranks checkpoint's k-th copies of its replicated tensors (ranks after the first), as a
// checkpoint of those tensors alone: digested beside it, each copy must hash as the first does.
// (Only rank 0's copy was read: a corrupt copy on another rank -- the one that rank loads --
// passed verify.)
std::vector<CheckpointInfo> replicaViews(const CheckpointInfo& info) {
  std::vector<CheckpointInfo> views;
  for (const LogicalTensor& t : info.tensors)
    for (std::size_t k = 0; k < t.replicas.size(); ++k) {
      if (views.size() <= k) {
        CheckpointInfo view = info;
        view.tensors.clear();
        views.push_back(std::move(view));
      }
      LogicalTensor copy = t;
      copy.pieces = {t.replicas[k]};
      copy.replicas.clear();
      views[k].tensors.push_back(std::move(copy));
    }
  return views;
}

// The first replicated tensor whose copy differs from its first copy, as a result (equal when none).
VerifyResult compareReplicas(const CheckpointInfo& info, const std::vector<TensorDigest>& first,
                             const std::vector<CheckpointInfo>& views, const std::vector<TensorDigest>* viewDigests) {
  VerifyResult result;
  std::map<std::string, std::uint64_t> hashOf;
  for (const TensorDigest& d : first) hashOf[d.name] = d.hash;
  auto named = [](const std::vector<LogicalTensor>& tensors, const std::string& name) {
    return &*std::find_if(tensors.begin(), tensors.end(), [&](const LogicalTensor& t) { return t.name == name; });
  };
  for (std::size_t k = 0; k < views.size(); ++k)
    for (const TensorDigest& d : viewDigests[k]) {  // in the plan's (name) order
      if (hashOf.at(d.name) == d.hash) continue;
      const LogicalTensor* copy = named(views[k].tensors, d.name);
      const LogicalTensor* original = named(info.tensors, d.name);
      result.equal = false;
      result.tensor = d.name;
      result.reason = "in " + info.path + " its copy in " + info.files[static_cast<std::size_t>(copy->pieces[0].file)] +
                      " differs from the one in " + info.files[static_cast<std::size_t>(original->pieces[0].file)];
      return result;
    }
  return result;
}

}  // namespace

std::vector<TensorDigest> digestCheckpoint(const CheckpointInfo& info, const VerifyOptions& options) {
  std::vector<std::vector<TensorDigest>> out;
  digestInto({&info}, out, options);
  return out.front();
}

VerifyResult verifyCheckpoints(const CheckpointInfo& a, const CheckpointInfo& b, const VerifyOptions& options) {
  requireConsistent(a);
  requireConsistent(b);
  VerifyResult result;
  result.itemsNotCompared = a.nonTensorItems.size() + b.nonTensorItems.size();
  std::map<std::string, const LogicalTensor*> inA, inB;
  for (const auto& t : a.tensors) inA[t.name] = &t;
  for (const auto& t : b.tensors) inB[t.name] = &t;
  std::set<std::string> names;
  for (const auto& [n, t] : inA) names.insert(n);
  for (const auto& [n, t] : inB) names.insert(n);
  // Structure first: it needs no data and names the first difference cheaply.
  for (const auto& name : names) {
    auto ta = inA.find(name), tb = inB.find(name);
    std::string why;
    if (ta == inA.end()) why = "only in " + b.path;
    else if (tb == inB.end()) why = "only in " + a.path;
    else if (ta->second->dtype != tb->second->dtype)
      why = "dtype " + std::string(dtypeName(ta->second->dtype)) + " vs " + std::string(dtypeName(tb->second->dtype));
    else if (ta->second->shape != tb->second->shape)
      why = "shape " + shapeText(ta->second->shape) + " vs " + shapeText(tb->second->shape);
    if (!why.empty()) {
      result.equal = false;
      result.tensor = name;
      result.reason = why;
      return result;
    }
  }
  // Both checkpoints, and the other copies of their replicated tensors, in one pass of the jobs.
  const std::vector<CheckpointInfo> copiesA = replicaViews(a), copiesB = replicaViews(b);
  std::vector<const CheckpointInfo*> all{&a, &b};
  for (const auto& v : copiesA) all.push_back(&v);
  for (const auto& v : copiesB) all.push_back(&v);
  std::vector<std::vector<TensorDigest>> digests;
  digestInto(all, digests, options);
  result.tensorsCompared = digests[0].size();
  for (const VerifyResult& replicas : {compareReplicas(a, digests[0], copiesA, digests.data() + 2),
                                       compareReplicas(b, digests[1], copiesB, digests.data() + 2 + copiesA.size())})
    if (!replicas.equal) {
      VerifyResult r = replicas;
      r.tensorsCompared = result.tensorsCompared;
      r.itemsNotCompared = result.itemsNotCompared;
      return r;
    }
  for (std::size_t i = 0; i < digests[0].size(); ++i) {
    if (digests[0][i].hash != digests[1][i].hash) {
      result.equal = false;
      result.tensor = digests[0][i].name;
      result.reason = "values differ";
      return result;
    }
  }
  return result;
}

}  // namespace stoker
