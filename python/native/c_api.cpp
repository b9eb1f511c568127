// c_api: errors, build facts, presets, knobs and the planner, for the Python package (stoker_c.h).
#include <cstdlib>
#include <cstring>
#include <new>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/api/include/torch/version.h>

#include "c_api_util.h"
#include "data/dataset.h"
#include "data/loader_options.h"
#include "net/remote_url.h"
#include "plan/shard_plan.h"
#include "util/error.h"

namespace stoker::capi {
namespace {
thread_local int tlsKind = STOKER_OK;
thread_local std::string tlsMessage;
}  // namespace

void setError(int kind, const std::string& message) {
  tlsKind = kind;
  tlsMessage = redactedUrl(message);  // Python raises it, logs print it: no password of a URL
}

void clearError() {
  tlsKind = STOKER_OK;
  tlsMessage.clear();
}

void setErrorFromCurrentException() {
  try {
    throw;
  } catch (const Error& e) {
    setError(static_cast<int>(e.kind()) + 1, e.what());
  } catch (const c10::Error& e) {
    setError(STOKER_BAD_INPUT, e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {
    setError(STOKER_BAD_INPUT, std::string("JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    setError(STOKER_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    setError(STOKER_INTERNAL, e.what());
  } catch (...) {
    setError(STOKER_INTERNAL, "unknown error");
  }
}

std::string jsonText(const nlohmann::json& doc) { return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

char* copyString(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

}  // namespace stoker::capi

using namespace stoker;
using namespace stoker::capi;

extern "C" {

const char* stoker_last_error(void) { return tlsMessage.c_str(); }
int stoker_last_error_kind(void) { return tlsKind; }
void stoker_free(char* text) { std::free(text); }

char* stoker_strdup(const char* text) { return ::strdup(text ? text : ""); }

char* stoker_build_info(void) {
  return guarded<>(static_cast<char*>(nullptr), [] {
#ifdef STOKER_WITH_CUDA
    const bool cuda = true;
#else
    const bool cuda = false;
#endif
    const nlohmann::json doc = {{"stoker", STOKER_VERSION}, {"torch", TORCH_VERSION}, {"cuda", cuda}, {"abi", 1}};
    return copyString(jsonText(doc));
  });
}

char* stoker_preset(const char* name, int rank, int worldSize) {
  return guarded<>(static_cast<char*>(nullptr),
                   [&] { return copyString(loaderOptionsToJson(presetByName(name ? name : "", rank, worldSize))); });
}

int stoker_prefetch_for_workers(int workers) { return prefetchForWorkers(workers); }

char* stoker_options_normalize(const char* optionsJson) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    return copyString(loaderOptionsToJson(loaderOptionsFromJson(optionsJson ? optionsJson : "{}", "options")));
  });
}

char* stoker_knobs(void) {
  return guarded<>(static_cast<char*>(nullptr), [] {
    nlohmann::json doc = nlohmann::json::array();
    for (const KnobInfo& k : knobTable())
      doc.push_back({{"name", k.name}, {"export_only", k.exportOnly}, {"effect", k.effect}, {"group", k.group},
                     {"pytorch", k.pytorch}, {"choices", knobChoices(k.name)}});
    return copyString(jsonText(doc));
  });
}

char* stoker_dataset_kinds(void) {
  return guarded<>(static_cast<char*>(nullptr), [] { return copyString(jsonText(nlohmann::json(datasetKinds()))); });
}

char* stoker_plan(const char* requestJson) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    const nlohmann::json r = nlohmann::json::parse(requestJson ? requestJson : "{}");
    PlanRequest p;
    p.samples = r.value("samples", std::int64_t{0});
    p.shardSamples = r.value("shard_samples", std::vector<std::int64_t>{});
    p.worldSize = r.value("world_size", 1);
    p.batchSize = r.value("batch_size", std::int64_t{0});
    p.seed = r.value("seed", std::uint64_t{0});
    p.epoch = r.value("epoch", std::int64_t{0});
    p.shuffle = r.value("shuffle", true);
    p.dropLast = r.value("drop_last", false);
    p.weights = r.value("weights", std::vector<double>{});
    p.stepMs = r.value("step_ms", std::vector<double>{});
    p.resumeFrom = r.value("resume_from", std::int64_t{0});
    validatePlanRequest(p);
    return copyString(shardPlanToJson(p, makeShardPlan(p)));
  });
}

}  // extern "C"
