#include "data/loader_options.h"
#include "data/sampler.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "image/image_transforms.h"
#include "util/error.h"
#include "util/json_number.h"

namespace stoker {
namespace {

using nlohmann::json;

const std::vector<std::pair<LoadingMode, const char*>> kModes = {
    {LoadingMode::Auto, "auto"}, {LoadingMode::Resident, "resident"}, {LoadingMode::Streaming, "streaming"}};
const std::vector<std::pair<SamplerType, const char*>> kSamplers = {
    {SamplerType::Sequential, "sequential"},
    {SamplerType::Random, "random"},
    {SamplerType::RandomWithReplacement, "random_with_replacement"},
    {SamplerType::Distributed, "distributed"},
    {SamplerType::Weighted, "weighted"}};
const std::vector<std::pair<ReaderMode, const char*>> kReaders = {{ReaderMode::Mmap, "mmap"}, {ReaderMode::Read, "read"}};
const std::vector<std::pair<MemoryFormat, const char*>> kFormats = {
    {MemoryFormat::Auto, "auto"}, {MemoryFormat::Nchw, "nchw"}, {MemoryFormat::Nhwc, "nhwc"}};
const std::vector<std::pair<NormalizeOn, const char*>> kNormalizeOn = {
    {NormalizeOn::Auto, "auto"}, {NormalizeOn::Host, "host"}, {NormalizeOn::Device, "device"}};

template <typename E>
std::string enumName(const std::vector<std::pair<E, const char*>>& table, E v) {
  for (auto& [e, n] : table)
    if (e == v) return n;
  return "?";
}

template <typename E>
E enumFromName(const std::vector<std::pair<E, const char*>>& table, const std::string& field, const std::string& s) {
  std::string allowed;
  for (auto& [e, n] : table) {
    if (s == n) return e;
    allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  }
  throwBadInput(field, "unknown value \"" + s + "\" (allowed: " + allowed + ")");
}

// One row per knob: how it reads from and writes to JSON.
struct FieldCodec {
  std::string name;
  std::function<json(const LoaderOptions&)> get;
  std::function<void(LoaderOptions&, const json&)> set;
};

template <typename T>
FieldCodec plain(const char* name, T LoaderOptions::*member) {
  return {name, [member](const LoaderOptions& o) { return json(o.*member); },
          [member, name](LoaderOptions& o, const json& j) {
            try {
              if constexpr (std::is_same_v<T, bool>) {
                if (!j.is_boolean()) throw std::invalid_argument("a boolean");
              } else if constexpr (std::is_integral_v<T>) {
                if (!j.is_number_integer()) throw std::invalid_argument("an integer");
                if constexpr (std::is_unsigned_v<T>)
                  if (j.is_number_integer() && !j.is_number_unsigned()) throw std::invalid_argument("a non-negative integer");
                // get<int>() wraps: num_workers 4294967298 became 2, shard_world_size 4294967300 became 4.
                if (!jsonInteger<T>(j))
                  throw std::invalid_argument("an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
                                              std::to_string(std::numeric_limits<T>::max()));
              } else if constexpr (std::is_floating_point_v<T>) {
                if (!j.is_number()) throw std::invalid_argument("a number");
              } else if constexpr (std::is_same_v<T, std::string>) {
                if (!j.is_string()) throw std::invalid_argument("a string");
              } else {
                if (!j.is_array()) throw std::invalid_argument("an array of numbers");
                for (auto& x : j)
                  if (!x.is_number()) throw std::invalid_argument("an array of numbers");
              }
              o.*member = j.get<T>();
            } catch (const std::invalid_argument& e) {
              throwBadInput(name, std::string("must be ") + e.what() + " (got " + j.dump() + ")");
            }
          }};
}

template <typename E>
FieldCodec enumerated(const char* name, E LoaderOptions::*member, const std::vector<std::pair<E, const char*>>& table) {
  return {name, [member, &table](const LoaderOptions& o) { return json(enumName(table, o.*member)); },
          [member, &table, name](LoaderOptions& o, const json& j) {
            if (!j.is_string()) throwBadInput(name, "must be a string (got " + j.dump() + ")");
            o.*member = enumFromName(table, name, j.get<std::string>());
          }};
}

const std::vector<FieldCodec>& codecs() {
  static const std::vector<FieldCodec> table = {
      plain("batch_size", &LoaderOptions::batch_size),
      plain("drop_last", &LoaderOptions::drop_last),
      plain("shuffle", &LoaderOptions::shuffle),
      plain("seed", &LoaderOptions::seed),
      plain("num_workers", &LoaderOptions::num_workers),
      plain("prefetch", &LoaderOptions::prefetch),
      plain("auto_tune", &LoaderOptions::auto_tune),
      enumerated("loading_mode", &LoaderOptions::loading_mode, kModes),
      enumerated("reader_mode", &LoaderOptions::reader_mode, kReaders),
      plain("part_size", &LoaderOptions::part_size),
      plain("max_inflight_parts", &LoaderOptions::max_inflight_parts),
      plain("cache_dir", &LoaderOptions::cache_dir),
      plain("cache_limit", &LoaderOptions::cache_limit),
      plain("shard_rank", &LoaderOptions::shard_rank),
      plain("shard_world_size", &LoaderOptions::shard_world_size),
      plain("worker_id", &LoaderOptions::worker_id),
      plain("pin_memory", &LoaderOptions::pin_memory),
      plain("persistent_workers", &LoaderOptions::persistent_workers),
      plain("timeout", &LoaderOptions::timeout),
      plain("multiprocessing_context", &LoaderOptions::multiprocessing_context),
      enumerated("sampler_type", &LoaderOptions::sampler_type, kSamplers),
      plain("weights", &LoaderOptions::weights),
      plain("num_samples", &LoaderOptions::num_samples),
      enumerated("memory_format", &LoaderOptions::memory_format, kFormats),
      plain("non_blocking", &LoaderOptions::non_blocking),
      plain("generator_seed", &LoaderOptions::generator_seed),
      plain("enable_transforms", &LoaderOptions::enable_transforms),
      plain("transforms", &LoaderOptions::transforms),
      enumerated("normalize_on", &LoaderOptions::normalize_on, kNormalizeOn),
      plain("skip_bad_samples", &LoaderOptions::skip_bad_samples),
      plain("collate_buffer_size", &LoaderOptions::collate_buffer_size),
      plain("vram_max_usage", &LoaderOptions::vram_max_usage),
      plain("reuse_buffers", &LoaderOptions::reuse_buffers),
      plain("telemetry_interval_ms", &LoaderOptions::telemetry_interval_ms),
  };
  return table;
}

template <typename T>
std::string got(T v) {
  std::ostringstream s;
  s << v;
  return " (got " + s.str() + ")";
}

}  // namespace

std::string loadingModeName(LoadingMode m) { return enumName(kModes, m); }
std::string samplerTypeName(SamplerType s) { return enumName(kSamplers, s); }

LoaderOptions::Builder LoaderOptions::builder() { return Builder(); }

LoaderOptions LoaderOptions::Builder::build() const {
  validateLoaderOptions(o_);
  return o_;
}

int prefetchForWorkers(int workers) { return std::min(1024, std::max(8, 2 * workers)); }

LoaderOptions gpuOptimized() {
  LoaderOptions o;
  o.batch_size = 256;
  // One core stays with the training thread, which helps collate whenever it
  // would otherwise wait for a batch.
  o.num_workers = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1);
  // On 16 cores a fixed depth of 8 kept 7 of the 15 workers waiting.
  o.prefetch = prefetchForWorkers(o.num_workers);
  o.auto_tune = true;
  o.pin_memory = true;
  o.persistent_workers = true;
  o.non_blocking = true;
  o.loading_mode = LoadingMode::Auto;
  o.memory_format = MemoryFormat::Auto;
  return o;
}

LoaderOptions distributedOptimized(int rank, int worldSize) {
  LoaderOptions o = gpuOptimized();
  o.sampler_type = SamplerType::Distributed;
  o.shard_rank = rank;
  o.shard_world_size = worldSize;
  o.drop_last = true;
  validateLoaderOptions(o);
  return o;
}

LoaderOptions debugMode() {
  LoaderOptions o;
  o.num_workers = 0;
  o.prefetch = 1;
  o.auto_tune = false;
  o.shuffle = false;
  o.sampler_type = SamplerType::Sequential;
  o.persistent_workers = false;
  o.drop_last = false;
  o.timeout = 60;
  return o;
}

LoaderOptions presetByName(const std::string& name, int rank, int worldSize) {
  if (name == "gpu_optimized") return gpuOptimized();
  if (name == "distributed_optimized") return distributedOptimized(rank, worldSize);
  if (name == "debug_mode") return debugMode();
  throwBadInput("preset " + name, "unknown (known: gpu_optimized, distributed_optimized, debug_mode)");
}

void validateLoaderOptions(const LoaderOptions& o) {
  if (!o.transforms.empty()) parseImageTransforms(o.transforms);  // throws "transforms: <which>: <why>"
  if (o.batch_size < 1) throwBadInput("batch_size", "must be at least 1" + got(o.batch_size));
  if (o.num_workers < 0 || o.num_workers > 256) throwBadInput("num_workers", "must be 0-256" + got(o.num_workers));
  if (o.prefetch < 1 || o.prefetch > 1024) throwBadInput("prefetch", "must be 1-1024" + got(o.prefetch));
  if (o.part_size < 4096) throwBadInput("part_size", "must be at least 4096 bytes" + got(o.part_size));
  if (o.max_inflight_parts < 1 || o.max_inflight_parts > 256)
    throwBadInput("max_inflight_parts", "must be 1-256" + got(o.max_inflight_parts));
  if (o.cache_limit < 0) throwBadInput("cache_limit", "must be 0 (no limit) or a number of bytes" + got(o.cache_limit));
  if (o.shard_world_size < 1) throwBadInput("shard_world_size", "must be at least 1" + got(o.shard_world_size));
  if (o.shard_world_size > kMaxWorldSize)
    throwBadInput("shard_world_size", "must be at most " + std::to_string(kMaxWorldSize) + got(o.shard_world_size));
  if (o.shard_rank < 0 || o.shard_rank >= o.shard_world_size)
    throwBadInput("shard_rank", "must be 0-" + std::to_string(o.shard_world_size - 1) + " for shard_world_size " +
                                    std::to_string(o.shard_world_size) + got(o.shard_rank));
  if (o.worker_id < 0) throwBadInput("worker_id", "must be non-negative" + got(o.worker_id));
  if (!(o.timeout >= 0) || std::isinf(o.timeout)) throwBadInput("timeout", "must be 0 (none) or a positive number of seconds" + got(o.timeout));
  const std::string& ctx = o.multiprocessing_context;
  if (!ctx.empty() && ctx != "fork" && ctx != "spawn" && ctx != "forkserver")
    throwBadInput("multiprocessing_context", "must be empty, fork, spawn or forkserver (got \"" + ctx + "\")");
  if (o.num_samples < 0) throwBadInput("num_samples", "must be 0 (dataset size) or positive" + got(o.num_samples));
  if (o.sampler_type == SamplerType::Weighted) {
    if (o.weights.empty()) throwBadInput("weights", "the weighted sampler needs one weight per sample");
    double sum = 0;
    for (double w : o.weights) {
      if (!(w >= 0) || std::isinf(w)) throwBadInput("weights", "must be finite and non-negative" + got(w));
      sum += w;
    }
    if (sum <= 0) throwBadInput("weights", "must not all be zero");
  }
  if (o.collate_buffer_size < 0) throwBadInput("collate_buffer_size", "must be 0 (auto) or positive" + got(o.collate_buffer_size));
  if (!(o.vram_max_usage >= 0.5 && o.vram_max_usage <= 0.99))
    throwBadInput("vram_max_usage", "must be 0.50-0.99" + got(o.vram_max_usage));
  if (o.telemetry_interval_ms < 10) throwBadInput("telemetry_interval_ms", "must be at least 10" + got(o.telemetry_interval_ms));
}

std::string loaderOptionsToJson(const LoaderOptions& o) {
  json doc = json::object();
  for (const auto& c : codecs()) doc[c.name] = c.get(o);
  return doc.dump(2) + "\n";
}

LoaderOptions loaderOptionsFromJson(const std::string& text, const std::string& source) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) throwBadInput(source, "not valid JSON");
  if (!doc.is_object()) throwBadInput(source, "must be a JSON object of knob names");
  LoaderOptions o;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const FieldCodec* codec = nullptr;
    for (const auto& c : codecs())
      if (c.name == it.key()) codec = &c;
    if (!codec) throwBadInput(source + ": " + it.key(), "unknown option (see `stoker bench --help-options`)");
    codec->set(o, it.value());
  }
  validateLoaderOptions(o);
  return o;
}

LoaderOptions loadLoaderOptions(const std::string& path) {
  std::ifstream in(path);
  if (!in) throwIo(path, "cannot open", errno);
  std::stringstream text;
  text << in.rdbuf();
  return loaderOptionsFromJson(text.str(), path);
}

bool loaderOptionsFileSets(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.contains(key);
}

void saveLoaderOptions(const std::string& path, const LoaderOptions& o) {
  validateLoaderOptions(o);
  AtomicFile file(path);
  const std::string text = loaderOptionsToJson(o);
  file.write(text.data(), text.size());
  file.commit();
}

namespace {
template <typename E>
std::vector<std::string> enumNames(const std::vector<std::pair<E, const char*>>& table) {
  std::vector<std::string> out;
  for (auto& entry : table) out.emplace_back(entry.second);
  return out;
}
}  // namespace

std::vector<std::string> knobChoices(const std::string& knob) {
  if (knob == "loading_mode") return enumNames(kModes);
  if (knob == "sampler_type") return enumNames(kSamplers);
  if (knob == "reader_mode") return enumNames(kReaders);
  if (knob == "memory_format") return enumNames(kFormats);
  if (knob == "normalize_on") return enumNames(kNormalizeOn);
  return {};
}

std::vector<std::string> changedKnobs(const LoaderOptions& a, const LoaderOptions& b) {
  const nlohmann::json ja = nlohmann::json::parse(loaderOptionsToJson(a)), jb = nlohmann::json::parse(loaderOptionsToJson(b));
  std::vector<std::string> out;
  for (const KnobInfo& k : knobTable())
    if (ja.value(k.name, nlohmann::json()) != jb.value(k.name, nlohmann::json())) out.push_back(k.name);
  return out;
}

std::string describeChange(const LoaderOptions& a, const LoaderOptions& b) {
  const nlohmann::json ja = nlohmann::json::parse(loaderOptionsToJson(a)), jb = nlohmann::json::parse(loaderOptionsToJson(b));
  auto text = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) return std::to_string(v.size()) + " weights";
    return v.dump();
  };
  std::string out;
  for (const std::string& k : changedKnobs(a, b))
    out += (out.empty() ? "" : ", ") + k + " " + text(ja[k]) + " \u2192 " + text(jb[k]);
  return out;
}

bool isBatchBoundaryKnob(const std::string& knob) {
  static const char* const live[] = {"num_workers",       "prefetch",        "auto_tune",        "pin_memory",
                                     "non_blocking",      "reuse_buffers",   "enable_transforms", "generator_seed",
                                     "memory_format",     "timeout",         "persistent_workers", "collate_buffer_size",
                                     "telemetry_interval_ms", "worker_id",   "multiprocessing_context", "skip_bad_samples"};
  for (const char* k : live)
    if (knob == k) return true;
  return false;
}

std::vector<InactiveKnob> inactiveKnobs(const LoaderOptions& o, bool hostDevice, bool remoteDataset) {
  std::vector<InactiveKnob> out;
  auto add = [&out](const char* knob, const std::string& reason) { out.push_back({knob, reason}); };
  if (o.num_workers == 0) {
    add("prefetch", "no effect with num_workers = 0: each batch is made on the consumer's thread when it asks");
    add("persistent_workers", "no worker threads with num_workers = 0");
  }
  if (hostDevice) {
    const std::string why = "no effect on cpu: batches stay in host memory, nothing is copied to a device";
    add("pin_memory", why);
    add("non_blocking", why);
  }
  if (o.sampler_type == SamplerType::Random || o.sampler_type == SamplerType::Sequential) {
    // The weighted and with-replacement samplers deal their draws across the ranks themselves.
    add("shard_rank", "used by the distributed, weighted and random_with_replacement samplers (to shard a "
                      "random or sequential order, choose sampler_type = distributed)");
    add("shard_world_size", "used by the distributed, weighted and random_with_replacement samplers (to shard a "
                            "random or sequential order, choose sampler_type = distributed)");
  }
  if (o.sampler_type != SamplerType::Weighted) add("weights", "used only by the weighted sampler (sampler_type = weighted)");
  if (o.sampler_type != SamplerType::Weighted && o.sampler_type != SamplerType::RandomWithReplacement)
    add("num_samples", "used only by the weighted and random_with_replacement samplers");
  if (o.sampler_type == SamplerType::Sequential || o.sampler_type == SamplerType::Weighted ||
      o.sampler_type == SamplerType::RandomWithReplacement)
    add("shuffle", "the " + samplerTypeName(o.sampler_type) + " sampler decides the order itself");
  if (o.transforms.empty())
    add("normalize_on", "used only by image datasets with transforms (their ToTensor + Normalize)");
  if (!o.transforms.empty())
    add("enable_transforms", "transforms decide what runs (add RandomHorizontalFlip(0.5) there for a flip)");
  if (o.reader_mode != ReaderMode::Read && !remoteDataset) {
    add("part_size", "used only with reader_mode = read and by s3:// or http(s):// datasets");
    add("max_inflight_parts", "used only with reader_mode = read and by s3:// or http(s):// datasets");
  }
  if (!remoteDataset) add("cache_dir", "used only by s3:// or http(s):// datasets");
  if (!remoteDataset || o.cache_dir.empty()) add("cache_limit", "used only with cache_dir set, by s3:// or http(s):// datasets");
  return out;
}

const std::vector<KnobInfo>& knobTable() {
  static const std::vector<KnobInfo> table = {
      {"batch_size", false, "samples per batch", "Batches", "DataLoader(batch_size=)"},
      {"drop_last", false, "drop the last partial batch (every batch the same shape)", "Batches", "DataLoader(drop_last=)"},
      {"shuffle", false, "random order each epoch; false serves samples in order", "Batches", "DataLoader(shuffle=) / DistributedSampler(shuffle=)"},
      {"seed", false, "sampler seed; epoch e draws with seed + e", "Batches", "generator.manual_seed() / DistributedSampler(seed=)"},
      {"num_workers", false, "collate threads; 0 collates on the consumer's thread", "Workers", "DataLoader(num_workers=) (processes there, threads here)"},
      {"prefetch", false, "most batches ready or in flight ahead of the consumer", "Workers", "DataLoader(prefetch_factor=) x num_workers"},
      {"auto_tune", false, "re-size the prefetch depth each epoch from memory headroom", "Workers", "none (flodl's per-epoch depth tuning)"},
      {"loading_mode", false, "resident (dataset on the device, gather) / streaming (collate + copy) / auto", "Memory", "none (DALI/flodl-style resident datasets)"},
      {"reader_mode", false, "file datasets: mmap (zero-copy) or read (into memory, part_size reads)", "Files", "none (s3dlio's reader modes)"},
      {"part_size", false, "read mode: bytes per read call; remote datasets: bytes per range request", "Files", "none (s3dlio's part size)"},
      {"max_inflight_parts", false, "read mode: reads in parallel; remote datasets: parts in flight per worker (small reads count by bytes)", "Files", "none (s3dlio's parallel parts)"},
      {"cache_dir", false, "remote datasets: keep the parts read in this folder and serve later epochs from it (shared by the ranks of a node)", "Files", "none (MosaicML Streaming's local cache, cache_dir=)"},
      {"cache_limit", false, "bytes cache_dir may hold; the least recently used parts go first (0 = no limit)", "Files", "none (MosaicML Streaming's cache_limit=)"},
      {"shard_rank", false, "this rank (distributed sampler; weighted and with-replacement draws are dealt across the ranks)", "Distributed", "DistributedSampler(rank=)"},
      {"shard_world_size", false, "number of ranks (distributed sampler; weighted and with-replacement draws are dealt across them)", "Distributed", "DistributedSampler(num_replicas=)"},
      {"worker_id", false, "this loader's id in telemetry records", "Telemetry", "none (names this loader in telemetry)"},
      {"pin_memory", false, "page-locked staging buffers (copy bandwidth; simulated devices halve it unpinned)", "Memory", "DataLoader(pin_memory=)"},
      {"persistent_workers", false, "keep worker threads between epochs", "Workers", "DataLoader(persistent_workers=)"},
      {"timeout", false, "seconds before a stalled batch raises an error naming the stage", "Workers", "DataLoader(timeout=)"},
      {"multiprocessing_context", true, "PyTorch worker start method; Stoker's workers are threads", "Workers", "DataLoader(multiprocessing_context=)"},
      {"sampler_type", false, "sequential, random, random_with_replacement, distributed, weighted", "Batches", "DataLoader(sampler=SequentialSampler / RandomSampler / DistributedSampler / WeightedRandomSampler)"},
      {"weights", false, "weighted sampler: one weight per sample", "Batches", "WeightedRandomSampler(weights=)"},
      {"num_samples", false, "draws per epoch for replacement and weighted sampling", "Batches", "RandomSampler(num_samples=) / WeightedRandomSampler(num_samples=)"},
      {"memory_format", false, "4-d fields as NCHW or channels-last (NHWC); auto = NHWC on CUDA", "Memory", "tensor.to(memory_format=torch.channels_last)"},
      {"non_blocking", false, "copies overlap compute; false copies on the consumer's thread", "Memory", "tensor.to(device, non_blocking=True)"},
      {"generator_seed", false, "seed of per-sample transform randomness", "Transforms", "DataLoader(generator=) seeding the transforms"},
      {"enable_transforms", false, "a random horizontal flip of each sample's 4-d float fields (tensor datasets such as Fashion-MNIST; with transforms set, they decide)", "Transforms", "a collate_fn flipping each sample with p = 0.5 (in the export)"},
      {"transforms", false, "image datasets: torchvision-named pipeline, e.g. RandomResizedCrop(224),RandomHorizontalFlip(),Normalize(imagenet)", "Transforms", "torchvision.transforms.Compose([...]) (the same names and arguments)"},
      {"normalize_on", false, "image datasets: where ToTensor + Normalize run; device = images cross as u8 (a quarter of float32's bytes) and are widened there, bit-equal to the host's values; auto = device unless on cpu", "Transforms", "none (DALI/FFCV-style normalisation on the GPU after .to(device))"},
      {"skip_bad_samples", false, "skip and count undecodable samples (a batch comes out shorter) instead of stopping", "Transforms", "none (a try/except in Dataset.__getitem__ plus a collate_fn that drops None)"},
      {"collate_buffer_size", false, "staging buffers kept pooled; 0 = workers + prefetch", "Workers", "none (Stoker's staging-buffer pool)"},
      {"vram_max_usage", false, "share of device memory the loader may use (mode choice, depth)", "Memory", "none (flodl's vram_max_usage)"},
      {"reuse_buffers", false, "batches share output buffers: valid only until the next batch", "Memory", "none (esper's buffer reuse)"},
      {"telemetry_interval_ms", false, "how often records reach observers", "Telemetry", "none"},
  };
  return table;
}

}  // namespace stoker
