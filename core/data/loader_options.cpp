#include "data/loader_options.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"

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

std::string pyBool(bool b) { return b ? "True" : "False"; }

}  // namespace

std::string loadingModeName(LoadingMode m) { return enumName(kModes, m); }
std::string samplerTypeName(SamplerType s) { return enumName(kSamplers, s); }

LoaderOptions::Builder LoaderOptions::builder() { return Builder(); }

LoaderOptions LoaderOptions::Builder::build() const {
  validateLoaderOptions(o_);
  return o_;
}

LoaderOptions gpuOptimized() {
  LoaderOptions o;
  o.batch_size = 256;
  // One core stays with the training thread, which helps collate whenever it
  // would otherwise wait for a batch.
  o.num_workers = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1);
  o.prefetch = 8;
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
  if (o.batch_size < 1) throwBadInput("batch_size", "must be at least 1" + got(o.batch_size));
  if (o.num_workers < 0 || o.num_workers > 256) throwBadInput("num_workers", "must be 0-256" + got(o.num_workers));
  if (o.prefetch < 1 || o.prefetch > 1024) throwBadInput("prefetch", "must be 1-1024" + got(o.prefetch));
  if (o.part_size < 4096) throwBadInput("part_size", "must be at least 4096 bytes" + got(o.part_size));
  if (o.max_inflight_parts < 1 || o.max_inflight_parts > 256)
    throwBadInput("max_inflight_parts", "must be 1-256" + got(o.max_inflight_parts));
  if (o.shard_world_size < 1) throwBadInput("shard_world_size", "must be at least 1" + got(o.shard_world_size));
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
  return {};
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
      {"part_size", false, "read mode: bytes per read call", "Files", "none (s3dlio's part size)"},
      {"max_inflight_parts", false, "read mode: reads in parallel", "Files", "none (s3dlio's parallel parts)"},
      {"shard_rank", false, "distributed sampler: this rank", "Distributed", "DistributedSampler(rank=)"},
      {"shard_world_size", false, "distributed sampler: number of ranks", "Distributed", "DistributedSampler(num_replicas=)"},
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
      {"enable_transforms", false, "random horizontal flip of 4-d float fields", "Transforms", "torchvision.transforms.RandomHorizontalFlip()"},
      {"collate_buffer_size", false, "staging buffers kept pooled; 0 = workers + prefetch", "Workers", "none (Stoker's staging-buffer pool)"},
      {"vram_max_usage", false, "share of device memory the loader may use (mode choice, depth)", "Memory", "none (flodl's vram_max_usage)"},
      {"reuse_buffers", false, "batches share output buffers: valid only until the next batch", "Memory", "none (esper's buffer reuse)"},
      {"telemetry_interval_ms", false, "how often records reach observers", "Telemetry", "none"},
  };
  return table;
}

std::string exportPyTorchSnippet(const LoaderOptions& o, const std::string& ds) {
  std::ostringstream s;
  s << "import torch\n"
    << "from torch.utils.data import DataLoader";
  const bool dist = o.sampler_type == SamplerType::Distributed;
  const bool weighted = o.sampler_type == SamplerType::Weighted;
  const bool replacement = o.sampler_type == SamplerType::RandomWithReplacement;
  if (dist) s << ", DistributedSampler";
  if (weighted) s << ", WeightedRandomSampler";
  if (replacement) s << ", RandomSampler";
  s << "\n\n";
  s << "generator = torch.Generator()\ngenerator.manual_seed(" << o.seed << ")\n";
  std::string samplerArg;
  if (dist) {
    s << "sampler = DistributedSampler(" << ds << ", num_replicas=" << o.shard_world_size << ", rank=" << o.shard_rank
      << ", shuffle=" << pyBool(o.shuffle) << ", seed=" << o.seed << ", drop_last=" << pyBool(o.drop_last) << ")\n"
      << "# call sampler.set_epoch(epoch) at the start of every epoch\n";
    samplerArg = "sampler=sampler";
  } else if (weighted) {
    s << "weights = torch.load('weights.pt')  # " << o.weights.size() << " weights, one per sample\n"
      << "sampler = WeightedRandomSampler(weights, num_samples=" << (o.num_samples ? std::to_string(o.num_samples) : "len(weights)")
      << ", replacement=True, generator=generator)\n";
    samplerArg = "sampler=sampler";
  } else if (replacement) {
    s << "sampler = RandomSampler(" << ds << ", replacement=True"
      << (o.num_samples ? ", num_samples=" + std::to_string(o.num_samples) : std::string()) << ", generator=generator)\n";
    samplerArg = "sampler=sampler";
  }
  s << "loader = DataLoader(\n    " << ds << ",\n    batch_size=" << o.batch_size << ",\n";
  if (samplerArg.empty())
    s << "    shuffle=" << pyBool(o.shuffle && o.sampler_type != SamplerType::Sequential) << ",\n    generator=generator,\n";
  else
    s << "    " << samplerArg << ",\n";
  s << "    drop_last=" << pyBool(o.drop_last) << ",\n    num_workers=" << o.num_workers << ",\n";
  if (o.num_workers > 0) {
    // PyTorch's prefetch_factor counts batches per worker; Stoker's prefetch counts them in total.
    s << "    prefetch_factor=" << std::max(1, (o.prefetch + o.num_workers - 1) / o.num_workers) << ",\n"
      << "    persistent_workers=" << pyBool(o.persistent_workers) << ",\n";
    if (!o.multiprocessing_context.empty()) s << "    multiprocessing_context='" << o.multiprocessing_context << "',\n";
  }
  s << "    pin_memory=" << pyBool(o.pin_memory) << ",\n    timeout=" << o.timeout << ",\n)\n";
  if (o.memory_format == MemoryFormat::Nhwc)
    s << "# batches: images = images.to(device, non_blocking=" << pyBool(o.non_blocking)
      << ", memory_format=torch.channels_last)\n";
  else
    s << "# batches: x = x.to(device, non_blocking=" << pyBool(o.non_blocking) << ")\n";
  return s.str();
}

std::string exportCppSnippet(const LoaderOptions& o) {
  const LoaderOptions d;
  std::ostringstream s;
  s << "#include \"data/loader.h\"\n\n"
    << "auto options = stoker::LoaderOptions::builder()\n";
  auto line = [&s](const std::string& call) { s << "    ." << call << "\n"; };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  line("batchSize(" + std::to_string(o.batch_size) + ")");
  if (o.drop_last != d.drop_last) line("dropLast(" + b(o.drop_last) + ")");
  if (o.shuffle != d.shuffle) line("shuffle(" + b(o.shuffle) + ")");
  if (o.seed != d.seed) line("seed(" + std::to_string(o.seed) + ")");
  line("numWorkers(" + std::to_string(o.num_workers) + ")");
  line("prefetch(" + std::to_string(o.prefetch) + ")");
  if (o.auto_tune != d.auto_tune) line("autoTune(" + b(o.auto_tune) + ")");
  static const char* modes[] = {"Auto", "Resident", "Streaming"};
  if (o.loading_mode != d.loading_mode)
    line(std::string("loadingMode(stoker::LoadingMode::") + modes[static_cast<int>(o.loading_mode)] + ")");
  if (o.reader_mode != d.reader_mode) line("readerMode(stoker::ReaderMode::Read)");
  if (o.part_size != d.part_size) line("partSize(" + std::to_string(o.part_size) + ")");
  if (o.max_inflight_parts != d.max_inflight_parts) line("maxInflightParts(" + std::to_string(o.max_inflight_parts) + ")");
  if (o.shard_world_size != 1 || o.shard_rank != 0)
    line("shard(" + std::to_string(o.shard_rank) + ", " + std::to_string(o.shard_world_size) + ")");
  if (o.worker_id != d.worker_id) line("workerId(" + std::to_string(o.worker_id) + ")");
  if (o.pin_memory != d.pin_memory) line("pinMemory(" + b(o.pin_memory) + ")");
  if (o.persistent_workers != d.persistent_workers) line("persistentWorkers(" + b(o.persistent_workers) + ")");
  if (o.timeout != d.timeout) {
    std::ostringstream t;
    t << o.timeout;
    line("timeout(" + t.str() + ")");
  }
  static const char* samplers[] = {"Sequential", "Random", "RandomWithReplacement", "Distributed", "Weighted"};
  if (o.sampler_type != d.sampler_type)
    line(std::string("sampler(stoker::SamplerType::") + samplers[static_cast<int>(o.sampler_type)] + ")");
  if (!o.weights.empty()) line("weights(weights)  // " + std::to_string(o.weights.size()) + " weights");
  if (o.num_samples != d.num_samples) line("numSamples(" + std::to_string(o.num_samples) + ")");
  static const char* formats[] = {"Auto", "Nchw", "Nhwc"};
  if (o.memory_format != d.memory_format)
    line(std::string("memoryFormat(stoker::MemoryFormat::") + formats[static_cast<int>(o.memory_format)] + ")");
  if (o.non_blocking != d.non_blocking) line("nonBlocking(" + b(o.non_blocking) + ")");
  if (o.generator_seed != d.generator_seed) line("generatorSeed(" + std::to_string(o.generator_seed) + ")");
  if (o.enable_transforms != d.enable_transforms) line("enableTransforms(" + b(o.enable_transforms) + ")");
  if (o.collate_buffer_size != d.collate_buffer_size) line("collateBufferSize(" + std::to_string(o.collate_buffer_size) + ")");
  if (o.vram_max_usage != d.vram_max_usage) {
    std::ostringstream t;
    t << o.vram_max_usage;
    line("vramMaxUsage(" + t.str() + ")");
  }
  if (o.reuse_buffers != d.reuse_buffers) line("reuseBuffers(" + b(o.reuse_buffers) + ")");
  if (o.telemetry_interval_ms != d.telemetry_interval_ms)
    line("telemetryIntervalMs(" + std::to_string(o.telemetry_interval_ms) + ")");
  s << "    .build();\n"
    << "stoker::Loader loader(dataset, options, stoker::DeviceSpec::parse(\"cuda:0\"));\n"
    << "for (int64_t epoch = 0; epoch < epochs; ++epoch)\n"
    << "  for (const stoker::Batch& batch : loader.epoch(epoch)) { /* batch[\"images\"] */ }\n";
  return s.str();
}

}  // namespace stoker
