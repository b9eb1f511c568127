// c_api_loader: the loader and its epochs for the Python package (stoker_c.h). Batches leave as
// DLPack views of the core's own tensors, or as those tensors themselves for the extension
// stoker._batches (stoker_c_tensors.h): no copy either way, and under reuse_buffers the
// buffer-pool lease stays with the tensor, so a block is recycled only once Python has released
// every tensor viewing it.
#include <ATen/DLConvertor.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/SmallVector.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "c_api_handles.h"
#include "c_api_opening.h"
#include "c_api_util.h"
#include "stoker_c_tensors.h"
#include "data/dataset.h"
#include "data/datasets/device_tensor_dataset.h"
#include "data/datasets/scan_exchange_json.h"
#include "data/datasets/tensor_dataset.h"
#include "data/datasets/web_dataset.h"
#include "data/device.h"
#include "data/loader.h"
#include "net/http_transfer.h"
#include "net/remote_url.h"
#include "telemetry/telemetry_publisher.h"
#include "util/error.h"
#include "util/progress.h"

using namespace stoker;
using namespace stoker::capi;

namespace {

// A batch's field as DLPack, written here rather than by at::toDLPack: that one sets the stride of
// every size-1 dimension to 1 (torch >= 1.13: a batch of one-channel images reached PyTorch as
// [N, 1, H, W] with channels-last strides), and it makes an autograd view of the tensor first,
// which with the from_blob that held the lease was a fifth of stoker_epoch_next's time (1.5-2 us a
// batch). The export holds the core's tensor (its storage) and the block's lease (reuse_buffers
// recycles the block once Python has released every tensor viewing it).
DLManagedTensor* exportField(const at::Tensor& t, std::shared_ptr<void> keep) {
  struct Export {
    DLManagedTensor managed;
    at::Tensor tensor;
    std::shared_ptr<void> keep;
    // Inline for the dimensions batches have (std::vector: two more allocations a field).
    c10::SmallVector<int64_t, 6> shape, strides;
  };
  const c10::DeviceType type = t.device().type();  // CPU or CUDA: checked for the whole batch first
  // torch 1.13's DLPack has no bool: a bool field goes as its bytes (uint8), and Python views it as
  // bool again (as the extension's path hands it). Before, the export threw half-way.
  const DLDataType dtype = t.scalar_type() == at::kBool ? DLDataType{kDLUInt, 8, 1} : at::getDLDataType(t);
  auto* e = new Export{{}, t, std::move(keep), {t.sizes().begin(), t.sizes().end()}, {t.strides().begin(), t.strides().end()}};
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data_ptr();
  d.device.device_type = type == c10::kCUDA ? kDLCUDA : kDLCPU;
  d.device.device_id = type == c10::kCUDA ? t.device().index() : 0;
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = dtype;
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Export*>(self->manager_ctx); };
  return &e->managed;
}

// Adds what the core's records leave out before passing them on: the loader's name (several
// loaders in one script), its dataset spec and options (the Monitor hands them to the Loader
// workspace to re-tune the script's loader).
class DescribingObserver : public TelemetryObserver {
 public:
  DescribingObserver(std::shared_ptr<TelemetryObserver> next, std::string name, std::string dataset, std::string options)
      : next_(std::move(next)), name_(std::move(name)), dataset_(std::move(dataset)), options_(std::move(options)) {}
  void onRecord(const TelemetryRecord& record) override {
    TelemetryRecord described = record;
    if (!name_.empty()) described.loader = name_;
    described.dataset = dataset_;
    described.options = options_;
    next_->onRecord(described);
  }

 private:
  std::shared_ptr<TelemetryObserver> next_;
  std::string name_, dataset_, options_;
};

// The caller's all-gather (Python: torch.distributed.all_gather_object) as the core's ScanExchange.
ScanExchange scanExchangeThrough(stoker_exchange_fn exchange, void* user) {
  return scanExchangeOverJson([exchange, user](const std::string& mine) {
    const std::unique_ptr<char, void (*)(void*)> got(exchange(user, mine.c_str()), std::free);
    if (!got) throw Error(ErrorKind::Network, "sharing WebDataset scans", "the ranks' exchange failed (see the Python error)");
    return std::string(got.get());
  });
}

}  // namespace

struct StokerLoader {
  std::shared_ptr<TelemetryPublisher> publisher;  // outlives the loader: its last records get out
  // Fired when the script closes the loader while a call still uses it (an epoch waiting in
  // next() on another thread): that call then ends at once, and the loader with it.
  CancelToken closing;
  std::unique_ptr<Loader> loader;
  // Epochs freed while a call on another thread still waits in them: each runs until that call
  // returns (at most a wait slice), and a new epoch waits for them (stoker_epoch_start).
  std::atomic<int> epochsClosing{0};
  ~StokerLoader() {
    loader.reset();
    if (publisher) publisher->flush(500);
  }
};

struct StokerEpoch {
  std::shared_ptr<StokerLoader> loader;  // first: it outlives the epoch, which uses its core
  std::optional<Epoch> epoch;
  std::mutex consumer;              // one call at a time takes batches (threads sharing an iterator)
  std::atomic<bool> closed{false};  // stoker_epoch_free came while a call was using the epoch
  at::Tensor lastIndices;           // of the batch handed out last (stoker_epoch_indices)
  bool countedClosing = false;      // in loader->epochsClosing until the core's epoch is gone
  ~StokerEpoch() {
    epoch.reset();
    if (countedClosing) --loader->epochsClosing;
  }
};

namespace {

// Never destroyed: threads still inside a call at exit use them (see c_api_handles.h).
HandleTable<StokerLoader>& loaders() {
  static auto* table = new HandleTable<StokerLoader>;
  return *table;
}
HandleTable<StokerEpoch>& epochs() {
  static auto* table = new HandleTable<StokerEpoch>;
  return *table;
}

Use<StokerLoader> useLoader(const StokerLoader* handle) {
  Use<StokerLoader> used = loaders().use(handle);
  if (!used) throwBadInput("stoker.Loader", "closed");
  return used;
}

// The next batch of the epoch (its wait is over), or nullopt after the last. `keep`: the pooled
// block's lease under reuse_buffers, which every tensor handed to Python must hold (the pool
// recycles the block once Python has released the batch).
std::optional<Batch> takeBatch(StokerEpoch& handle, int capacity, std::shared_ptr<void>& keep) {
  std::optional<Batch> batch = handle.epoch->next();
  if (!batch) return std::nullopt;
  const int n = static_cast<int>(batch->tensors.size());
  if (n > capacity) throwBadInput("batch", std::to_string(n) + " fields, room for " + std::to_string(capacity));
  keep = batch->buffers.lock();
  for (const at::Tensor& t : batch->tensors)
    if (!t.is_cpu() && !t.is_cuda()) throwBadInput("batch", "a field on " + t.device().str() + " (only CPU and CUDA fields are handed to Python)");
  handle.lastIndices = std::move(batch->indices);
  return batch;
}

// stoker_epoch_next(_tensors): waits up to `waitMs`, then hands the next batch to `emit`, which
// returns the field count. STOKER_CLOSED once the epoch was closed (also by a close that came while
// this call waited: the loader's closing cancelled the wait).
template <class Emit>
int nextBatch(StokerEpoch* handle, int waitMs, int capacity, Emit&& emit) {
  const Use<StokerEpoch> used = epochs().use(handle);
  if (!used) return STOKER_CLOSED;
  StokerEpoch& e = *used;
  const int n = guarded<>(-1, [&] {
    std::lock_guard<std::mutex> lock(e.consumer);
    if (e.closed) return STOKER_CLOSED;
    if (!e.epoch->waitReady(std::chrono::milliseconds(waitMs))) return STOKER_NOT_READY;
    std::shared_ptr<void> keep;
    std::optional<Batch> batch = takeBatch(e, capacity, keep);
    return batch ? emit(*batch, keep) : 0;
  });
  // Closed while it waited: the epoch's close, or its loader's (whose closing cancelled the wait).
  return n < 0 && (e.closed || e.loader->closing.cancelled()) ? STOKER_CLOSED : n;
}

// A view of `t` whose storage also holds `keep` (only under reuse_buffers: a tensor of its own costs
// an allocation more than handing the core's tensor over).
at::Tensor leased(const at::Tensor& t, std::shared_ptr<void> keep) {
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(), [t, keep = std::move(keep)](void*) {}, t.options());
}

// `spec`: the dataset spec the workbench can open again ("" for tensors a script holds).
StokerLoader* wrapLoader(std::unique_ptr<Loader> loader, const std::string& spec, const LoaderOptions& options,
                         const char* publishJson, const char* name, int telemetryRank) {
  auto made = std::make_unique<StokerLoader>();
  if (publishJson && *publishJson) {
    const auto addresses = nlohmann::json::parse(publishJson).get<std::vector<std::string>>();
    if (!addresses.empty()) made->publisher = std::make_shared<TelemetryPublisher>(addresses);
  }
  made->loader = std::move(loader);
  if (made->publisher)
    // The spec as the Monitor may see it: a URL's password or presigned signature hidden.
    made->loader->addObserver(std::make_shared<DescribingObserver>(made->publisher, name ? name : "", redactedUrl(spec),
                                                                   loaderOptionsToJson(options)));
  if (telemetryRank >= 0) made->loader->setTelemetryRank(telemetryRank);
  made->loader->setCancelToken(&made->closing);
  return static_cast<StokerLoader*>(loaders().add(std::move(made)));
}

StokerLoader* makeLoader(std::shared_ptr<Dataset> dataset, const std::string& spec, const LoaderOptions& options,
                         const char* device, const char* publishJson, const char* name, int telemetryRank) {
  return wrapLoader(std::make_unique<Loader>(std::move(dataset), options, DeviceSpec::parse(device && *device ? device : "cpu")),
                    spec, options, publishJson, name, telemetryRank);
}

LoaderOptions optionsFrom(const char* optionsJson) {
  return loaderOptionsFromJson(optionsJson && *optionsJson ? optionsJson : "{}", "options");
}

nlohmann::json epochJson(const EpochSummary& e) {
  nlohmann::json stages = nlohmann::json::object();
  for (const auto& [stage, s] : e.stageSeconds) stages[stage] = s;
  return {{"epoch", e.epoch},          {"batches", e.batches},     {"samples", e.samples},
          {"bytes", e.bytes},          {"seconds", e.seconds},     {"data_wait_s", e.waitSeconds},
          {"prefetch_depth", e.depth}, {"completed", e.completed}, {"stage_seconds", stages},
          {"skipped", e.skipped},      {"first_skipped", e.firstSkipped}};
}

}  // namespace

extern "C" {

StokerLoader* stoker_loader_open(const char* spec, const char* optionsJson, const char* device, const char* publishJson,
                                 const char* name, int telemetryRank, stoker_exchange_fn exchange, void* user) {
  return guarded<>(static_cast<StokerLoader*>(nullptr), [&] {
    const LoaderOptions options = optionsFrom(optionsJson);
    const std::string text = spec ? spec : "";
    refuseTransformsUnlessImages(text, options.transforms, "transforms");
    std::shared_ptr<Dataset> dataset;
    {
      PythonOpening opening(text);  // a long open: progress on stderr, Ctrl-C stops it
      if (exchange && text.rfind("wds:", 0) == 0)
        dataset = openWebDataset(text, options, scanExchangeThrough(exchange, user));
      else
        dataset = openDataset(text, options);
      opening.opened();
    }
    return makeLoader(std::move(dataset), text, options, device, publishJson, name, telemetryRank);
  });
}

StokerLoader* stoker_loader_from_dlpack(void* const* tensors, int count, const char* namesJson, const char* optionsJson,
                                        const char* device, const char* publishJson, const char* name, int telemetryRank) {
  // Take ownership of every tensor first, so none leaks when a later step fails.
  std::vector<at::Tensor> fields;
  std::string failure;
  for (int i = 0; i < count; ++i) {
    try {
      fields.push_back(at::fromDLPack(static_cast<DLManagedTensor*>(tensors[i])));
    } catch (const std::exception& e) {
      auto* t = static_cast<DLManagedTensor*>(tensors[i]);
      if (t && t->deleter) t->deleter(t);
      if (failure.empty()) failure = e.what();
    }
  }
  return guarded<>(static_cast<StokerLoader*>(nullptr), [&] {
    if (!failure.empty()) throwBadInput("tensors", failure);
    const auto names = nlohmann::json::parse(namesJson ? namesJson : "[]").get<std::vector<std::string>>();
    if (names.size() != fields.size()) throwBadInput("tensors", "one name per tensor");
    if (fields.empty()) throwBadInput("tensors", "give at least one tensor");
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const at::Tensor& t = fields[f];
      if (t.device() != fields[0].device())
        throwBadInput(names[f], "is on " + t.device().str() + ", " + names[0] + " on " + fields[0].device().str() +
                                    ": give every tensor on one device");
      if (!t.device().is_cpu() && !t.device().is_cuda())
        throwBadInput(names[f], "is on " + t.device().str() + ": give CPU or CUDA tensors");
      if (t.dim() < 1) throwBadInput(names[f], "needs a sample dimension (dim 0); it is a scalar");
      if (!t.is_contiguous()) throwBadInput(names[f], "is not contiguous (call .contiguous() first)");
      if (t.size(0) != fields[0].size(0))
        throwBadInput(names[f], "has " + std::to_string(t.size(0)) + " samples, " + names[0] + " has " +
                                    std::to_string(fields[0].size(0)) + ": tensors must share dim 0");
    }
    const LoaderOptions options = optionsFrom(optionsJson);
    if (!options.transforms.empty()) throwBadInput("transforms", "only image datasets take transforms, not tensors");
    if (fields[0].is_cuda()) {
      // Tensors the script holds on a GPU: the loader is resident on them there, without a copy
      // (the Python side has synchronised the stream that wrote them).
      const DeviceSpec spec = DeviceSpec::parse(device && *device ? device : "cpu");
      return wrapLoader(loaderOverDeviceTensors(names, fields, options, DeviceBackend::create(spec)), "", options,
                        publishJson, name, telemetryRank);
    }
    auto dataset = std::make_shared<TensorDataset>("tensors from Python", names, fields);
    return makeLoader(std::move(dataset), "", options, device, publishJson, name, telemetryRank);
  });
}

void stoker_loader_free(StokerLoader* handle) {
  try {
    std::shared_ptr<StokerLoader> loader = loaders().remove(handle);
    // Still used (an epoch some thread waits in): that wait ends now, and the loader with it.
    if (loader && loader.use_count() > 1) loader->closing.cancel();
  } catch (...) {
  }
}

int stoker_quiesce(int waitMs) { return CallsInFlight::instance().waitIdle(waitMs) ? 1 : 0; }

void stoker_forget_calls_after_fork(void) { CallsInFlight::instance().forgetAfterFork(); }

char* stoker_loader_describe(StokerLoader* handle) {
  return guarded<>(static_cast<char*>(nullptr), [&] {
    const Use<StokerLoader> used = useLoader(handle);
    const Loader& l = *used->loader;
    nlohmann::json fields = nlohmann::json::array();
    for (const FieldSpec& f : l.dataset().fields())
      fields.push_back({{"name", f.name}, {"dtype", std::string(c10::toString(f.dtype))}, {"shape", f.sampleShape}});
    const DeviceMemory m = l.memory();
    nlohmann::json doc = {{"description", l.dataset().description()},
                          {"samples", l.dataset().size()},
                          {"batches", l.batchesPerEpoch()},
                          {"samples_per_epoch", l.samplesPerEpoch()},
                          {"mode", loadingModeName(l.mode())},
                          {"prefetch_depth", l.prefetchDepth()},
                          {"device", l.device().name()},
                          {"notes", l.notes()},
                          {"advice", l.advice()},
                          {"fields", fields},
                          {"memory", {{"total", m.total}, {"free", m.free}, {"used", m.used}, {"reserved", m.reserved},
                                      {"allocated", m.allocated}}},
                          {"pool_allocations", l.poolAllocations()},
                          // WebDataset reads shard after shard: its order is its own, not the sampler's.
                          {"own_order", l.dataset().hasOwnEpochOrder()},
                          {"options", nlohmann::json::parse(loaderOptionsToJson(l.options()))}};
    const EpochSummary last = l.lastEpoch();
    doc["last_epoch"] = last.epoch >= 0 ? epochJson(last) : nlohmann::json(nullptr);
    if (used->publisher)
      doc["telemetry"] = {{"sent", used->publisher->sent()}, {"dropped", used->publisher->dropped()}};
    // What the process has asked remote storage for (as the telemetry's net_* fields).
    if (const NetCounters& net = netCounters(); net.requests > 0)
      doc["network"] = {{"requests", net.requests.load()}, {"bytes", net.bytes.load()}, {"retries", net.retries.load()}};
    return copyString(jsonText(doc));
  });
}

int stoker_loader_raise_workers_for_network(StokerLoader* handle, int batchesPerWorker) {
  return guarded<>(-1, [&] { return useLoader(handle)->loader->raiseWorkersForNetwork(batchesPerWorker) ? 1 : 0; });
}

int64_t stoker_loader_order(StokerLoader* handle, int64_t epoch, int64_t* out, int64_t capacity) {
  return guarded<>(std::int64_t{-1}, [&] {
    if (epoch < 0) throwBadInput("epoch " + std::to_string(epoch), "must be non-negative");
    const Use<StokerLoader> used = useLoader(handle);
    const Loader& l = *used->loader;
    const std::vector<std::int64_t> order = epochIndicesFor(l.dataset(), l.options(), epoch);
    const auto n = static_cast<std::int64_t>(order.size());
    for (std::int64_t i = 0; i < n && i < capacity; ++i) out[i] = order[static_cast<std::size_t>(i)];
    return n;
  });
}

StokerEpoch* stoker_epoch_start(StokerLoader* handle, int64_t epoch, const int64_t* order, int64_t count,
                                const int64_t* sizes, int64_t sizeCount) {
  return guarded<>(static_cast<StokerEpoch*>(nullptr), [&] {
    const Use<StokerLoader> used = useLoader(handle);
    // An epoch the script freed while another thread's call still waits in it ends when that call
    // returns: a new `for` waits for it (2 s at most) rather than failing with "epoch N is still
    // being iterated" (the README says close and replace may come from another thread).
    for (int i = 0; i < 400 && used->epochsClosing.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto made = std::make_shared<StokerEpoch>();
    made->loader = used.shared();
    Loader& loader = *used->loader;
    if (order) {  // a plan's split or what is left of a resumed epoch
      made->epoch.emplace(loader.epochOver(epoch, std::vector<std::int64_t>(order, order + count),
                                           sizes ? std::vector<std::int64_t>(sizes, sizes + sizeCount)
                                                 : std::vector<std::int64_t>{}));
    } else {
      // The sampler's order. The core draws the next epoch's meanwhile and its workers make that
      // epoch's first batches before this one ends (persistent_workers): a `for` over the next
      // epoch starts with them ready.
      made->epoch.emplace(loader.epoch(epoch, Loader::Lookahead::NextEpoch));
    }
    return static_cast<StokerEpoch*>(epochs().add(std::move(made)));
  });
}

int stoker_epoch_queue_next(StokerEpoch* handle, int64_t nextEpoch, const int64_t* order, int64_t count,
                            const int64_t* sizes, int64_t sizeCount) {
  return guarded<>(-1, [&] {
    if (!order || count < 0 || (sizes && sizeCount < 0)) throwBadInput("next epoch", "no order given");
    const Use<StokerEpoch> used = epochs().use(handle);
    if (!used) return 0;  // closed: nothing to queue behind
    std::lock_guard<std::mutex> lock(used->consumer);
    return used->epoch->queueNext(nextEpoch, std::vector<std::int64_t>(order, order + count),
                                  sizes ? std::vector<std::int64_t>(sizes, sizes + sizeCount) : std::vector<std::int64_t>{})
               ? 1
               : 0;
  });
}

int stoker_epoch_next(StokerEpoch* handle, int waitMs, void** fields, int capacity) {
  return nextBatch(handle, waitMs, capacity, [&](Batch& batch, const std::shared_ptr<void>& keep) {
    const int n = static_cast<int>(batch.tensors.size());
    int f = 0;
    try {
      for (; f < n; ++f) fields[f] = exportField(batch.tensors[static_cast<std::size_t>(f)], keep);
    } catch (...) {  // the fields exported before it hold the batch's block: give them back
      for (int i = 0; i < f; ++i) {
        auto* m = static_cast<DLManagedTensor*>(fields[i]);
        m->deleter(m);
        fields[i] = nullptr;
      }
      throw;
    }
    return n;
  });
}

int stoker_epoch_next_tensors(StokerEpoch* handle, int waitMs, at::Tensor* out, int capacity) {
  return nextBatch(handle, waitMs, capacity, [&](Batch& batch, const std::shared_ptr<void>& keep) {
    const int n = static_cast<int>(batch.tensors.size());
    for (int f = 0; f < n; ++f) {
      at::Tensor& t = batch.tensors[static_cast<std::size_t>(f)];
      out[f] = keep ? leased(t, keep) : std::move(t);
    }
    return n;
  });
}

void* stoker_epoch_indices(StokerEpoch* handle) {
  return guarded<>(static_cast<void*>(nullptr), [&]() -> void* {
    const Use<StokerEpoch> used = epochs().use(handle);
    if (!used) return nullptr;
    std::lock_guard<std::mutex> lock(used->consumer);
    return used->lastIndices.defined() ? at::toDLPack(used->lastIndices) : nullptr;
  });
}

void stoker_epoch_free(StokerEpoch* handle) {
  try {
    std::shared_ptr<StokerEpoch> epoch = epochs().remove(handle);
    // Still used by a call on another thread: it returns STOKER_CLOSED and the epoch ends there.
    if (epoch) {
      epoch->closed = true;
      if (epoch.use_count() > 1 && !epoch->countedClosing) {  // whoever drops it last uncounts it
        ++epoch->loader->epochsClosing;
        epoch->countedClosing = true;
      }
    }
  } catch (...) {
  }
}

}  // extern "C"
