// data/loader_options: every knob of the loader (the s3dlio LoaderOptions set
// plus flodl's vram_max_usage and esper's buffer reuse), a fluent builder,
// presets, JSON load/save, validation, and the export of the current settings
// as a PyTorch DataLoader(...) snippet and a C++ builder snippet.
// Each knob changes the loader's behaviour or is listed as export-only in
// knobTable() (the workbench form and the docs read that table).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

enum class LoadingMode { Auto, Resident, Streaming };
enum class SamplerType { Sequential, Random, RandomWithReplacement, Distributed, Weighted };
enum class ReaderMode { Mmap, Read };
enum class MemoryFormat { Auto, Nchw, Nhwc };
enum class NormalizeOn { Auto, Host, Device };

std::string loadingModeName(LoadingMode m);
std::string samplerTypeName(SamplerType s);

struct LoaderOptions {
  std::int64_t batch_size = 32;
  bool drop_last = true;               // flodl's default: every batch has the same shape
  bool shuffle = true;                 // sequential order when false (sampler random/distributed)
  std::uint64_t seed = 0;              // sampler seed; epoch e uses seed + e like DistributedSampler
  int num_workers = 2;                 // collate threads; 0 collates on the caller's thread
  int prefetch = 4;                    // most batches ready or in flight ahead of the consumer
  bool auto_tune = true;               // re-size the prefetch depth every epoch from memory headroom
  LoadingMode loading_mode = LoadingMode::Auto;
  ReaderMode reader_mode = ReaderMode::Mmap;  // how file datasets reach memory
  std::int64_t part_size = 8 << 20;    // read mode: bytes per read
  int max_inflight_parts = 4;          // read mode: parallel reads
  std::string cache_dir;               // remote datasets: parts kept on local disk here ("" = none)
  std::int64_t cache_limit = 0;        //   and the most bytes kept there (0 = no limit)
  int shard_rank = 0;                  // distributed sampler: this rank
  int shard_world_size = 1;            //   and the number of ranks
  int worker_id = 0;                   // names this loader in telemetry (several loaders per process)
  bool pin_memory = true;              // page-locked staging buffers for host-to-device copies
  bool persistent_workers = true;      // keep worker threads between epochs
  double timeout = 0;                  // seconds a batch may take before an error names the stage; 0 = none
  std::string multiprocessing_context; // export only: Stoker's workers are threads
  SamplerType sampler_type = SamplerType::Random;
  std::vector<double> weights;         // weighted sampler: one weight per sample
  std::int64_t num_samples = 0;        // random-with-replacement / weighted draws per epoch; 0 = dataset size
  MemoryFormat memory_format = MemoryFormat::Auto;  // 4-d fields as NCHW or channels-last
  bool non_blocking = true;            // copies to the device overlap; false copies on the consumer thread
  std::uint64_t generator_seed = 0;    // per-sample randomness of transforms
  bool enable_transforms = false;      // random horizontal flip of 4-d float fields
  std::string transforms;              // image datasets: torchvision-named pipeline (image/image_transforms.h)
  // Where an image pipeline's ToDtype + Normalize run: device = images cross as u8 and are widened
  // there (image/byte_expansion); host = the workers write the final values; auto = device when
  // batches go to a device (not cpu).
  NormalizeOn normalize_on = NormalizeOn::Auto;
  bool skip_bad_samples = false;       // an undecodable sample is skipped and counted instead of stopping
  int collate_buffer_size = 0;         // staging buffers kept in the pool; 0 = workers + prefetch
  double vram_max_usage = 0.9;         // share of device memory the loader may fill (0.50-0.99)
  bool reuse_buffers = false;          // a batch's tensors are valid only until the next batch
  int telemetry_interval_ms = 500;     // how often the loader reports to its observers

  class Builder;
  static Builder builder();
};

class LoaderOptions::Builder {
 public:
  Builder() = default;
  explicit Builder(LoaderOptions start) : o_(std::move(start)) {}
  Builder& batchSize(std::int64_t v) { o_.batch_size = v; return *this; }
  Builder& dropLast(bool v) { o_.drop_last = v; return *this; }
  Builder& shuffle(bool v) { o_.shuffle = v; return *this; }
  Builder& seed(std::uint64_t v) { o_.seed = v; return *this; }
  Builder& numWorkers(int v) { o_.num_workers = v; return *this; }
  Builder& prefetch(int v) { o_.prefetch = v; return *this; }
  Builder& autoTune(bool v) { o_.auto_tune = v; return *this; }
  Builder& loadingMode(LoadingMode v) { o_.loading_mode = v; return *this; }
  Builder& readerMode(ReaderMode v) { o_.reader_mode = v; return *this; }
  Builder& partSize(std::int64_t v) { o_.part_size = v; return *this; }
  Builder& maxInflightParts(int v) { o_.max_inflight_parts = v; return *this; }
  Builder& cacheDir(std::string v) { o_.cache_dir = std::move(v); return *this; }
  Builder& cacheLimit(std::int64_t v) { o_.cache_limit = v; return *this; }
  Builder& shard(int rank, int worldSize) { o_.shard_rank = rank; o_.shard_world_size = worldSize; return *this; }
  Builder& workerId(int v) { o_.worker_id = v; return *this; }
  Builder& pinMemory(bool v) { o_.pin_memory = v; return *this; }
  Builder& persistentWorkers(bool v) { o_.persistent_workers = v; return *this; }
  Builder& timeout(double seconds) { o_.timeout = seconds; return *this; }
  Builder& multiprocessingContext(std::string v) { o_.multiprocessing_context = std::move(v); return *this; }
  Builder& sampler(SamplerType v) { o_.sampler_type = v; return *this; }
  Builder& weights(std::vector<double> v) { o_.weights = std::move(v); return *this; }
  Builder& numSamples(std::int64_t v) { o_.num_samples = v; return *this; }
  Builder& memoryFormat(MemoryFormat v) { o_.memory_format = v; return *this; }
  Builder& nonBlocking(bool v) { o_.non_blocking = v; return *this; }
  Builder& generatorSeed(std::uint64_t v) { o_.generator_seed = v; return *this; }
  Builder& enableTransforms(bool v) { o_.enable_transforms = v; return *this; }
  Builder& transforms(std::string v) { o_.transforms = std::move(v); return *this; }
  Builder& normalizeOn(NormalizeOn v) { o_.normalize_on = v; return *this; }
  Builder& skipBadSamples(bool v) { o_.skip_bad_samples = v; return *this; }
  Builder& collateBufferSize(int v) { o_.collate_buffer_size = v; return *this; }
  Builder& vramMaxUsage(double v) { o_.vram_max_usage = v; return *this; }
  Builder& reuseBuffers(bool v) { o_.reuse_buffers = v; return *this; }
  Builder& telemetryIntervalMs(int v) { o_.telemetry_interval_ms = v; return *this; }
  // Validates (see validateLoaderOptions) and returns the options.
  LoaderOptions build() const;

 private:
  LoaderOptions o_;
};

// Presets. gpu_optimized: workers = cores - 1 (the consumer helps), prefetch two batches a worker,
// pinned, persistent, auto mode. distributed_optimized: the same plus a distributed sampler for
// (rank, world). debug_mode: no workers, no shuffle, no prefetch, a timeout,
// so a failing sample shows up on the caller's thread in order.
LoaderOptions gpuOptimized();
// The prefetch depth that keeps `workers` workers busy: the ring holds every batch in flight, so a
// shallower one leaves workers idle. Two batches per worker (PyTorch's default prefetch_factor),
// at least 8, at most 1024.
int prefetchForWorkers(int workers);
LoaderOptions distributedOptimized(int rank, int worldSize);
LoaderOptions debugMode();
// By name: "gpu_optimized", "distributed_optimized" (rank 0 of 1 unless
// given), "debug_mode"; throws Error(BadInput) for others.
LoaderOptions presetByName(const std::string& name, int rank = 0, int worldSize = 1);

// Throws Error(BadInput) "<field>: must be ... (got ...)" for the first
// invalid field.
void validateLoaderOptions(const LoaderOptions& o);

// JSON with the knob names as keys. Reading starts from the defaults, so a
// file may hold only some knobs; an unknown key or a wrong type is an error
// naming the key. The result is validated.
std::string loaderOptionsToJson(const LoaderOptions& o);
LoaderOptions loaderOptionsFromJson(const std::string& text, const std::string& source = "options");
LoaderOptions loadLoaderOptions(const std::string& path);
// Whether the options file at `path` names `key` itself: a file written by hand to set a knob or
// two leaves the rest to the defaults, which a command may choose otherwise (false for a file
// that does not parse: loadLoaderOptions says why).
bool loaderOptionsFileSets(const std::string& path, const std::string& key);
void saveLoaderOptions(const std::string& path, const LoaderOptions& o);

// What a knob does in Stoker: the effect, or that it only matters in the
// exported PyTorch snippet.
struct KnobInfo {
  std::string name;
  bool exportOnly = false;
  std::string effect;
  std::string group;    // the workbench form's section: Batches, Workers, Memory, Files, ...
  std::string pytorch;  // the PyTorch equivalent, or "none (...)" with where the idea comes from
};
const std::vector<KnobInfo>& knobTable();
// The names an enumerated knob accepts (loading_mode, ...); empty for others.
std::vector<std::string> knobChoices(const std::string& knob);

// Knob names whose values differ between `a` and `b` (JSON keys, in the
// knob table's order), and "knob a → b" for each (weights: their count).
std::vector<std::string> changedKnobs(const LoaderOptions& a, const LoaderOptions& b);
std::string describeChange(const LoaderOptions& a, const LoaderOptions& b);
// Knobs a running loader can take between two batches (Loader::retune).
bool isBatchBoundaryKnob(const std::string& knob);

// Knobs that have no effect with these options (on a host-only device such
// as cpu when `hostDevice`; part_size and max_inflight_parts size the range
// requests of an s3:// or http(s):// dataset when `remoteDataset`), each with
// the reason in words: the workbench form greys them out instead of accepting
// them silently.
struct InactiveKnob {
  std::string knob;
  std::string reason;
};
std::vector<InactiveKnob> inactiveKnobs(const LoaderOptions& o, bool hostDevice, bool remoteDataset = false);

// Exports (data/loader_export.cpp). The PyTorch snippet builds `loader` and
// `set_epoch(epoch)`; called before each epoch, the loader serves the same
// samples in the same batches as Stoker with these options. `datasetExpr`
// names the Python dataset object. The C++ snippet defines stokerOptions()
// and feedEpochs(dataset, epochs) on `device`. A weighted sampler's weights
// are read from `weightsFile` (write it with saveWeightsFile). Both throw
// what validateLoaderOptions throws.
std::string exportPyTorchSnippet(const LoaderOptions& o, const std::string& datasetExpr = "dataset",
                                 const std::string& weightsFile = "weights.json");
// The same loader in a PyTorch training script through the Python package: stoker.Loader(spec,
// ...) with every knob that differs from the defaults; its epochs serve exactly Stoker's samples.
std::string exportStokerSnippet(const LoaderOptions& o, const std::string& datasetSpec, const std::string& device = "cpu",
                                const std::string& weightsFile = "weights.json");
std::string exportCppSnippet(const LoaderOptions& o, const std::string& device = "cuda:0",
                             const std::string& weightsFile = "weights.json");
// The weights as a JSON array (exact doubles); loading throws Error(BadInput)
// naming the file.
void saveWeightsFile(const std::string& path, const std::vector<double>& weights);
std::vector<double> loadWeightsFile(const std::string& path);

}  // namespace stoker
