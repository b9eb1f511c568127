// c_api_ckpt: the checkpoint engine (inspect, convert, verify) and the auto-tuner for the Python
// package (stoker_c.h), answering with the JSON documents of `stoker ckpt ... --json` and
// `stoker tune --json`. Progress reaches a C callback, which can also cancel; so does Ctrl-C
// (c_api_interrupt), which then raises KeyboardInterrupt in Python.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "c_api_interrupt.h"
#include "c_api_opening.h"
#include "c_api_util.h"
#include "ckpt/convert.h"
#include "ckpt/inspect.h"
#include "ckpt/reshard_plan.h"
#include "ckpt/select.h"
#include "ckpt/verify.h"
#include "cli_output.h"
#include "data/dataset.h"
#include "data/loader_tune.h"
#include "tune_json.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/redacted_url.h"

using namespace stoker;
using namespace stoker::capi;

namespace {

// Forwards progress to the caller's callback; a non-zero answer cancels the work.
class CallbackProgress : public ProgressSink {
 public:
  CallbackProgress(stoker_progress_fn fn, void* user, CancelToken& cancel) : fn_(fn), user_(user), cancel_(cancel) {}
  void progress(const ProgressUpdate& u) override {
    if (fn_ && fn_(user_, u.done, u.total, redactedUrl(u.item).c_str()) != 0) cancel_.cancel();
  }

 private:
  stoker_progress_fn fn_;
  void* user_;
  CancelToken& cancel_;
};

nlohmann::json parseRequest(const char* json) { return nlohmann::json::parse(json && *json ? json : "{}"); }

// The answer as `stoker ckpt ... --json` prints it: a URL's password or presigned signature hidden.
char* answer(const nlohmann::json& doc) { return copyString(redactedUrl(jsonText(doc))); }

}  // namespace

extern "C" {

char* stoker_ckpt_inspect(const char* path) {
  return guarded<>(static_cast<char*>(nullptr),
                   [&] { return answer(checkpointJson(inspectCheckpoint(path ? path : ""))); });
}

char* stoker_ckpt_convert(const char* src, const char* dst, const char* requestJson, stoker_progress_fn progress, void* user) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    const nlohmann::json r = parseRequest(requestJson);
    const TargetSpec target = parseTargetSpec(r.value("to", std::string()), r.value("dtype", std::string("keep")));
    CancelToken cancel;
    SigintCancels interrupt(cancel);  // Ctrl-C stops at a safe point (finished files kept, resume completes)
    CallbackProgress sink(progress, user, cancel);
    ConvertOptions options;
    options.memoryBudget = parseByteSize(r.value("memory_budget", std::string("256MiB")), "memory_budget");
    options.resume = r.value("resume", false);
    options.force = r.value("force", false);
    options.rank = r.value("rank", 0);
    options.worldSize = r.value("world_size", 1);
    options.progress = &sink;
    options.cancel = &cancel;
    CheckpointInfo info = inspectCheckpoint(src ? src : "");
    selectTensors(info, r.value("include", std::vector<std::string>{}), r.value("exclude", std::vector<std::string>{}));
    requireConsistent(info);
    const ReshardPlan plan = planReshard(info, target);
    const int jobs = r.value("jobs", 0);
    if (jobs < 0) throwBadInput("jobs", "must be positive (0: one per core)");
    options.jobs = jobs > 0 ? jobs : defaultConvertJobs(plan, options.memoryBudget);
    if (r.value("dry_run", false)) {
      validateConvertOptions(plan, options);
      return answer(planJson(info, plan, options));
    }
    const ConvertReport report = convertCheckpoint(info, plan, dst ? dst : "", options);
    return answer(convertJson(info, plan, dst ? dst : "", report));
  });
}

char* stoker_ckpt_verify(const char* a, const char* b, stoker_progress_fn progress, void* user) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    CancelToken cancel;
    SigintCancels interrupt(cancel);
    CallbackProgress sink(progress, user, cancel);
    VerifyOptions options;
    options.progress = &sink;
    options.cancel = &cancel;
    const VerifyResult r = verifyCheckpoints(inspectCheckpoint(a ? a : ""), inspectCheckpoint(b ? b : ""), options);
    nlohmann::json doc = {{"equal", r.equal}, {"tensors_compared", r.tensorsCompared},
                          {"non_tensor_items_not_compared", r.itemsNotCompared}};
    doc["first_difference"] = r.equal ? nlohmann::json(nullptr) : nlohmann::json({{"tensor", r.tensor}, {"reason", r.reason}});
    return answer(doc);
  });
}

char* stoker_tune(const char* spec, const char* optionsJson, const char* requestJson, stoker_progress_fn progress, void* user) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    const nlohmann::json r = parseRequest(requestJson);
    const LoaderOptions base = loaderOptionsFromJson(optionsJson && *optionsJson ? optionsJson : "{}", "options");
    TuneSpec tune;
    tune.budgetSeconds = r.value("budget_s", 60.0);
    if (!(tune.budgetSeconds > 0) || tune.budgetSeconds > 86400) throwBadInput("budget_s", "must be between 0 and 86400 seconds");
    const std::string device = r.value("device", std::string("cpu"));
    const std::string text = spec ? spec : "";
    LoaderSessionOptions session;
    session.sim.capacityBytes = 16LL << 30;
    CancelToken cancel;
    SigintCancels interrupt(cancel);  // Ctrl-C ends the search, its opens too, with KeyboardInterrupt
    // The first open and each trial's re-open (a remote WebDataset is scanned again) say how far a
    // long one is.
    auto open = [&text, &cancel](const LoaderOptions& o) {
      PythonOpening opening(text, &cancel);
      auto opened = openDataset(text, o);
      opening.opened();
      return opened;
    };
    const std::shared_ptr<Dataset> dataset = open(base);
    tune.remoteDataset = datasetIsRemote(text);
    tune.reopen = open;
    const TuneResult result = autoTune(dataset, base, expandDevices(device), session, tune, &cancel,
                                       [&](const TuneTrial& t, double secondsSoFar) {
                                         const std::string change = t.change.empty() ? "(start)" : t.change;
                                         if (progress && progress(user, static_cast<std::uint64_t>(secondsSoFar * 1000),
                                                                  static_cast<std::uint64_t>(tune.budgetSeconds * 1000),
                                                                  change.c_str()) != 0)
                                           cancel.cancel();
                                       });
    return answer(tuneJson(result, text, device, tune.budgetSeconds));
  });
}

}  // extern "C"
