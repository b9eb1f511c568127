// data/loader_export: the current LoaderOptions as code a user pastes into
// their own program: a PyTorch DataLoader that serves the same samples in
// the same batches as Stoker (tests run it with Debian's torch and compare
// the indices), and a C++ function built against the core (a test compiles
// it). A weighted sampler's weights travel in a JSON file both load.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader_options.h"
#include "data/datasets/dataset_spec.h"
#include "data/pytorch_script.h"
#include "image/image_transforms.h"
#include "net/remote_url.h"
#include "util/atomic_file.h"
#include "util/ends_with.h"
#include "util/error.h"

namespace stoker {
namespace {

std::string pyBool(bool b) { return b ? "True" : "False"; }

// A Python string literal (JSON's escaping is valid Python for these). A path that is not UTF-8
// cannot be written into Python source as text: said plainly (it was "internal: type_error.316").
std::string pyString(const std::string& s) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throwBadInput(s, "is not UTF-8: the export writes it into Python source; rename it");
  }
}

// Seconds as Python reads them back exactly (the shortest round-trip form: 0.1234567891, 60.0).
std::string fmtSeconds(double v) { return nlohmann::json(v).dump(); }

// An exported snippet is pasted, shared and committed: a dataset URL's password or presigned
// signature is left out (redactedUrl), and the snippet says so where it would have been.
std::string secretNote(const std::string& spec) {
  if (!holdsSecret(spec)) return {};
  return "# The dataset URL held a password, a presigned signature or a token, shown as ***: put it back, or give\n"
         "# the credentials as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) instead.\n";
}

}  // namespace

std::string pytorchDatasetDefinition(const std::string& spec, const LoaderOptions& o) {
  std::ostringstream s;
  const auto colon = spec.find(':');
  const std::string kind = colon == std::string::npos ? spec : spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  // Remote data (s3://, http(s)://): np.load, ImageFolder and load_file read local paths only, and
  // the script written "as pasted" failed on a URL. It stops there and says so, as for tokens.
  if (spec.find("://") != std::string::npos) {
    s << "raise NotImplementedError(" << pyString("PyTorch's readers take local paths, not " + spec +
                                                  "; the \"Python (stoker)\" export reads it remotely: stoker.Loader(\"" + spec + "\", ...)")
      << ")\n";
    return s.str();
  }
  if (kind == "fashion-mnist") {
    // The same files and the same tensors as Stoker's (float32 / 255, as ToTensor), no download.
    const std::string dir = rest.empty() ? "/usr/share/datasets/fashion-mnist" : rest;
    s << "import gzip, os\nimport numpy as np\nfrom torch.utils.data import TensorDataset\n\n\n"
      << "def read_idx(stem, directory=" << pyString(dir) << "):\n"
      << "    path = os.path.join(directory, stem)\n"
      << "    packed = os.path.exists(path + \".gz\")\n"
      << "    with (gzip.open(path + \".gz\", \"rb\") if packed else open(path, \"rb\")) as f:\n"
      << "        data = f.read()\n"
      << "    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], \"big\") for i in range(data[3])]\n"
      << "    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)\n\n\n"
      << "images = torch.from_numpy(read_idx(\"train-images-idx3-ubyte\").astype(np.float32) / 255).unsqueeze(1)\n"
      << "labels = torch.from_numpy(read_idx(\"train-labels-idx1-ubyte\").astype(np.int64))\n"
      << "dataset = TensorDataset(images, labels)  # Debian's dataset-fashion-mnist, the train split\n";
  } else if (kind == "imagefolder") {
    const std::string dir = rest.substr(0, DatasetSpec::pathEnd(rest));  // the folder as the core reads it
    s << "import torchvision\n\n"
      << "dataset = torchvision.datasets.ImageFolder(" << pyString(dir)
      << (o.transforms.empty() ? ")\n" : ", transform=transform)\n");
  } else if (kind == "synthetic") {
    // synthetic:N,SHAPE[,dtype...]: the same count, shape, dtype and labels (index % 10), made per
    // sample as it is asked for; the values are torch's, not Stoker's. Only digits reach the code.
    std::vector<std::string> parts;
    std::stringstream in(rest);
    for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
    const auto digits = [](const std::string& t, bool allowX) {
      return !t.empty() && std::all_of(t.begin(), t.end(), [allowX](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (allowX && c == 'x'); });
    };
    const std::map<std::string, std::string> dtypes = {{"f32", "float32"}, {"f16", "float16"}, {"bf16", "bfloat16"},
                                                       {"f64", "float64"}, {"u8", "uint8"}, {"i32", "int32"},
                                                       {"i64", "int64"}};
    std::string dtype = "f32";
    if (parts.size() > 2 && !parts[2].empty() && !std::isdigit(static_cast<unsigned char>(parts[2][0]))) dtype = parts[2];
    std::transform(dtype.begin(), dtype.end(), dtype.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (parts.size() < 2 || !digits(parts[0], false) || !digits(parts[1], true) || !dtypes.count(dtype)) {
      s << "raise ValueError(" << pyString("not a synthetic spec: " + spec) << ")\n";
      return s.str();
    }
    std::string shape = parts[1];
    std::replace(shape.begin(), shape.end(), 'x', ',');
    const bool floating = dtype[0] == 'f' || dtype == "bf16";
    s << "class SyntheticDataset(torch.utils.data.Dataset):\n"
      << "    \"\"\"synthetic: Stoker's count, shape, dtype and labels; the values are torch's own.\"\"\"\n\n"
      << "    def __len__(self):\n        return " << parts[0] << "\n\n"
      << "    def __getitem__(self, index):\n"
      << "        g = torch.Generator().manual_seed(index)\n"
      << (floating ? "        x = torch.rand((" + shape + ",), generator=g).to(torch." + dtypes.at(dtype) + ")\n"
                   : "        x = torch.randint(0, 100, (" + shape + ",), generator=g, dtype=torch." + dtypes.at(dtype) + ")\n")
      << "        return x, index % 10\n\n\n"
      << "dataset = SyntheticDataset()\n";
  } else if (endsWith(spec, ".npy")) {
    s << "import numpy as np\nfrom torch.utils.data import TensorDataset\n\n"
      << "dataset = TensorDataset(torch.from_numpy(np.load(" << pyString(spec) << ")))\n";
  } else if (endsWith(spec, ".safetensors")) {
    s << "import json\nfrom safetensors.torch import load_file  # pip install safetensors\n"
      << "from torch.utils.data import TensorDataset\n\n"
      << "tensors = load_file(" << pyString(spec) << ")\n"
      << "# The fields in the file's order (Stoker's), not by name: safetensors' writer stores by dtype.\n"
      << "with open(" << pyString(spec) << ", \"rb\") as f:\n"
      << "    header = json.loads(f.read(int.from_bytes(f.read(8), \"little\")))\n"
      << "names = sorted((k for k in header if k != \"__metadata__\"), key=lambda k: header[k][\"data_offsets\"][0])\n"
      << "dataset = TensorDataset(*(tensors[name] for name in names))\n";
  } else {
    // tokens:, megatron:, wds:: PyTorch has no reader of its own; the script stops there and says so.
    s << "raise NotImplementedError(" << pyString("PyTorch has no built-in reader for " + kind +
                                                  ": datasets; the \"Python (stoker)\" export runs this loader: "
                                                  "stoker.Loader(\"" + spec + "\", ...)")
      << ")\n";
  }
  return s.str();
}

std::string exportPyTorchScript(const LoaderOptions& options, const std::string& givenSpec, const std::string& device,
                                const std::string& weightsFile) {
  LoaderOptions o = options;
  const std::string spec = redactedUrl(givenSpec);
  std::string note = secretNote(givenSpec);
  if (device == "cpu" && (o.pin_memory || o.non_blocking)) {
    // Pinning helps only a copy to a GPU; on cpu it costs a copy per batch for nothing.
    o.pin_memory = false;
    o.non_blocking = false;
    note += "# pin_memory and non_blocking are off: on cpu nothing is copied to a device\n";
  }
  const std::string snippet = exportPyTorchSnippet(o, "dataset", weightsFile);
  // The dataset is defined after the transforms (ImageFolder takes them) and before the sampler.
  const auto at = snippet.find("\n\nSEED = ");
  std::string oneLine = spec + " on " + device;
  std::replace(oneLine.begin(), oneLine.end(), '\n', ' ');
  std::replace(oneLine.begin(), oneLine.end(), '\r', ' ');
  const std::string head = "# " + oneLine + ": runs as pasted\n" + note;
  if (at == std::string::npos) return head + snippet;
  return head + snippet.substr(0, at) + "\n\n" + pytorchDatasetDefinition(spec, o) + snippet.substr(at);
}

void saveWeightsFile(const std::string& path, const std::vector<double>& weights) {
  AtomicFile file(path);
  const std::string text = nlohmann::json(weights).dump() + "\n";  // 17 significant digits: exact
  file.write(text.data(), text.size());
  file.commit();
}

std::vector<double> loadWeightsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throwBadInput(path, "cannot open the weights file");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_array()) throwBadInput(path, "not a JSON array of weights");
  std::vector<double> weights;
  weights.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number()) throwBadInput(path, "weights must be numbers");
    weights.push_back(v.get<double>());
  }
  return weights;
}

std::string exportPyTorchSnippet(const LoaderOptions& o, const std::string& ds, const std::string& weightsFile) {
  validateLoaderOptions(o);
  const bool dist = o.sampler_type == SamplerType::Distributed;
  const bool weighted = o.sampler_type == SamplerType::Weighted;
  const bool replacement = o.sampler_type == SamplerType::RandomWithReplacement;
  // Stoker's random orders are torch's samplers drawing from a generator
  // seeded seed + epoch (data/sampler.h); shuffle=false serves in order.
  const bool random = o.sampler_type == SamplerType::Random && o.shuffle;
  const bool seeded = weighted || replacement || random;
  // One draw dealt across the ranks (ShardOfDraws, below).
  const bool dealsDraws = (weighted || replacement) && o.shard_world_size > 1;
  // torchrun's variables first: pasted into a job, a fixed rank made every rank read one shard.
  const std::string shardArgs = "num_replicas=int(os.environ.get(\"WORLD_SIZE\", " + std::to_string(o.shard_world_size) +
                                ")), rank=int(os.environ.get(\"RANK\", " + std::to_string(o.shard_rank) + "))";
  std::ostringstream s;
  s << "import torch\n";
  if (weighted) s << "import json\n";
  if (dist || dealsDraws) s << "import os\n";
  s << "from torch.utils.data import DataLoader, ";
  if (dist) s << "DistributedSampler";
  else if (weighted) s << "WeightedRandomSampler";
  else if (seeded) s << "RandomSampler";
  else s << "SequentialSampler";
  if (!o.transforms.empty()) {
    // The same names and arguments: give it to the dataset, e.g. ImageFolder(root, transform=transform).
    s << "\nimport functools  # transforms.Lambda's step, picklable for spawn workers\nfrom torchvision import transforms\n\ntransform = " << parseImageTransforms(o.transforms).torchvisionCompose()
      << "  # " << ds << " = torchvision.datasets.ImageFolder(ROOT, transform=transform)\n";
  }
  s << "\n\nSEED = " << o.seed << "\n";
  if (seeded) s << "generator = torch.Generator()\n";
  if (dist) {
    s << "sampler = DistributedSampler(" << ds << ", " << shardArgs << ", shuffle=" << pyBool(o.shuffle)
      << ", seed=SEED, drop_last=" << pyBool(o.drop_last) << ")\n";
  } else if (weighted) {
    s << "with open(" << pyString(weightsFile) << ") as f:  # " << o.weights.size() << " weights, one per sample\n"
      << "    weights = torch.tensor(json.load(f), dtype=torch.double)\n"
      << "sampler = WeightedRandomSampler(weights, num_samples="
      << (o.num_samples ? std::to_string(o.num_samples) : "len(weights)") << ", replacement=True, generator=generator)\n";
  } else if (replacement) {
    s << "sampler = RandomSampler(" << ds << ", replacement=True"
      << (o.num_samples ? ", num_samples=" + std::to_string(o.num_samples) : std::string()) << ", generator=generator)\n";
  } else if (random) {
    s << "sampler = RandomSampler(" << ds << ", generator=generator)\n";
  } else {
    s << "sampler = SequentialSampler(" << ds << ")\n";
  }
  if (dealsDraws) {
    // Stoker deals one draw across the ranks; PyTorch has no sampler for that, so the snippet does
    // it: the same draw on every rank (the generator seeded alike), this rank's positions of it.
    s << "\n\nclass ShardOfDraws(torch.utils.data.Sampler):\n"
      << "    \"\"\"Stoker's deal of one draw across the ranks, as DistributedSampler deals its order: every rank\n"
      << "    draws the same, rank r takes positions r, r + num_replicas, ... (padded from the start, or cut\n"
      << "    with drop_last), so the ranks take equal steps and together see the draw once.\"\"\"\n\n"
      << "    def __init__(self, sampler, num_replicas, rank, drop_last):\n"
      << "        self.sampler, self.num_replicas, self.rank, self.drop_last = sampler, num_replicas, rank, drop_last\n\n"
      << "    def __len__(self):\n"
      << "        n, w = len(self.sampler), self.num_replicas\n"
      << "        return n // w if self.drop_last else -(-n // w)\n\n"
      << "    def __iter__(self):\n"
      << "        draws = list(self.sampler)\n"
      << "        return iter([draws[i % len(draws)] for i in range(self.rank, len(self) * self.num_replicas, self.num_replicas)])\n\n\n"
      << "sampler = ShardOfDraws(sampler, " << shardArgs << ", drop_last=" << pyBool(o.drop_last) << ")\n";
  }
  const bool flips = o.enable_transforms && o.transforms.empty();
  // enable_transforms: the same transform; the draws are torch's default RNG, which DataLoader
  // seeds differently in each worker and epoch (a generator of the script's would be copied
  // into every worker in one state, and flip alike).
  if (flips)
    s << "\n\ndef flip_collate(samples):\n"
      << "    \"\"\"enable_transforms: a random horizontal flip of each sample's 4-d float fields.\"\"\"\n"
      << "    batch = torch.utils.data.default_collate(samples)\n"
      << "    fields = batch if isinstance(batch, (list, tuple)) else [batch]\n"
      << "    for t in fields:\n"
      << "        if torch.is_tensor(t) and t.dim() == 4 and t.is_floating_point():\n"
      << "            flip = torch.rand(t.shape[0]) < 0.5\n"
      << "            t[flip] = t[flip].flip(-1)\n"
      << "    return batch\n\n\n";
  s << "loader = DataLoader(\n    " << ds << ",\n    batch_size=" << o.batch_size << ",\n    sampler=sampler,\n"
    << "    drop_last=" << pyBool(o.drop_last) << ",\n    num_workers=" << o.num_workers << ",\n";
  if (flips) s << "    collate_fn=flip_collate,\n";
  if (o.num_workers > 0) {
    // PyTorch's prefetch_factor counts batches per worker; Stoker's prefetch counts them in total.
    s << "    prefetch_factor=" << std::max(1, (o.prefetch + o.num_workers - 1) / o.num_workers) << ",\n"
      << "    persistent_workers=" << pyBool(o.persistent_workers) << ",\n";
    if (!o.multiprocessing_context.empty()) s << "    multiprocessing_context=" << pyString(o.multiprocessing_context) << ",\n";
  }
  // DataLoader takes a timeout only with workers: with none it asserts timeout == 0 at the first batch
  // (debug_mode's export crashed there).
  s << "    pin_memory=" << pyBool(o.pin_memory) << ",\n";
  if (o.num_workers > 0) s << "    timeout=" << fmtSeconds(o.timeout) << ",\n";
  else if (o.timeout > 0) s << "    # timeout=" << fmtSeconds(o.timeout) << ": PyTorch takes one only with num_workers > 0\n";
  s << ")\n\n\n"
    << "def set_epoch(epoch):\n"
    << "    \"\"\"Call before each epoch: the loader then serves Stoker's samples for that epoch.\"\"\"\n";
  if (dist) s << "    sampler.set_epoch(epoch)\n";
  else if (seeded) s << "    generator.manual_seed((SEED + epoch) % 2**64)  # as Stoker's seed + epoch wraps\n";
  else s << "    pass  # in order every epoch\n";
  s << "\n\n# for epoch in range(epochs):\n#     set_epoch(epoch)\n#     for batch in loader:\n";
  if (o.memory_format == MemoryFormat::Nhwc)
    s << "#         images = images.to(device, non_blocking=" << pyBool(o.non_blocking)
      << ", memory_format=torch.channels_last)\n";
  else
    s << "#         x = x.to(device, non_blocking=" << pyBool(o.non_blocking) << ")\n";
  return s.str();
}

std::string exportStokerSnippet(const LoaderOptions& o, const std::string& givenSpec, const std::string& device,
                                const std::string& weightsFile) {
  validateLoaderOptions(o);
  const std::string datasetSpec = redactedUrl(givenSpec);
  const nlohmann::json values = nlohmann::json::parse(loaderOptionsToJson(o));
  // A JSON value as a Python literal (JSON's numbers and escaped strings are Python's).
  auto literal = [](const nlohmann::json& v) -> std::string {
    if (v.is_boolean()) return pyBool(v.get<bool>());
    if (v.is_null()) return "None";
    return v.dump();
  };
  const bool dist = o.sampler_type == SamplerType::Distributed;
  std::ostringstream s;
  s << "import stoker\n";
  if (!o.weights.empty()) s << "import json\n";
  s << "\n";
  if (!o.weights.empty())
    s << "with open(" << pyString(weightsFile) << ") as f:  # " << o.weights.size() << " weights, one per sample\n"
      << "    weights = json.load(f)\n\n";
  s << secretNote(givenSpec)
    << "# The loader as Stoker's workbench had it: stoker.Loader takes DataLoader's keywords and every\n"
    << "# LoaderOptions knob. Each `for` over it is the next epoch (loader.set_epoch(e) picks one).\n"
    << "loader = stoker.Loader(\n    " << pyString(datasetSpec) << ",\n";
  // batch_size, shuffle and drop_last always: stoker.Loader's defaults are DataLoader's (1, False, False).
  const std::vector<std::string> always = {"batch_size", "shuffle", "drop_last"};
  std::vector<std::string> knobs = always;
  for (const std::string& k : changedKnobs(LoaderOptions{}, o))
    if (std::find(always.begin(), always.end(), k) == always.end()) knobs.push_back(k);
  for (const std::string& k : knobs) {
    if (k == "shard_rank" || k == "shard_world_size") continue;  // rank= / world_size= below
    if (k == "multiprocessing_context") continue;  // export only: Stoker's workers are threads
    if (k == "weights") {
      s << "    weights=weights,\n";
      continue;
    }
    s << "    " << k << "=" << literal(values.at(k)) << ",\n";
  }
  if (dist)
    s << "    rank=" << o.shard_rank << ",  # under torchrun, leave rank and world_size out: RANK/WORLD_SIZE say them\n"
      << "    world_size=" << o.shard_world_size << ",\n";
  s << "    device=" << pyString(device) << ",\n)\n\n"
    << "# for epoch in range(epochs):\n"
    << "#     for batch in loader:  # a tuple of the dataset's fields, e.g. (images, labels), on the device\n"
    << "#         ...\n";
  return s.str();
}

std::string exportCppSnippet(const LoaderOptions& o, const std::string& device, const std::string& weightsFile) {
  validateLoaderOptions(o);
  const LoaderOptions d;
  std::ostringstream s;
  s << "#include <cstdint>\n#include <memory>\n\n#include \"data/loader.h\"\n\n"
    << "// The options as the workbench had them.\n"
    << "stoker::LoaderOptions stokerOptions() {\n"
    << "  return stoker::LoaderOptions::builder()\n";
  auto line = [&s](const std::string& call) { s << "      ." << call << "\n"; };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  auto num = [](double v) {
    std::ostringstream t;
    t.precision(17);
    t << v;
    return t.str();
  };
  line("batchSize(" + std::to_string(o.batch_size) + ")");
  if (o.drop_last != d.drop_last) line("dropLast(" + b(o.drop_last) + ")");
  if (o.shuffle != d.shuffle) line("shuffle(" + b(o.shuffle) + ")");
  if (o.seed != d.seed) line("seed(" + std::to_string(o.seed) + "u)");
  line("numWorkers(" + std::to_string(o.num_workers) + ")");
  line("prefetch(" + std::to_string(o.prefetch) + ")");
  if (o.auto_tune != d.auto_tune) line("autoTune(" + b(o.auto_tune) + ")");
  static const char* modes[] = {"Auto", "Resident", "Streaming"};
  if (o.loading_mode != d.loading_mode)
    line(std::string("loadingMode(stoker::LoadingMode::") + modes[static_cast<int>(o.loading_mode)] + ")");
  if (o.reader_mode != d.reader_mode) line("readerMode(stoker::ReaderMode::Read)");
  if (o.part_size != d.part_size) line("partSize(" + std::to_string(o.part_size) + ")");
  if (o.max_inflight_parts != d.max_inflight_parts) line("maxInflightParts(" + std::to_string(o.max_inflight_parts) + ")");
  if (!o.cache_dir.empty()) line("cacheDir(" + pyString(o.cache_dir) + ")");
  if (o.cache_limit != d.cache_limit) line("cacheLimit(" + std::to_string(o.cache_limit) + ")");
  if (o.shard_world_size != 1 || o.shard_rank != 0)
    line("shard(" + std::to_string(o.shard_rank) + ", " + std::to_string(o.shard_world_size) + ")");
  if (o.worker_id != d.worker_id) line("workerId(" + std::to_string(o.worker_id) + ")");
  if (o.pin_memory != d.pin_memory) line("pinMemory(" + b(o.pin_memory) + ")");
  if (o.persistent_workers != d.persistent_workers) line("persistentWorkers(" + b(o.persistent_workers) + ")");
  if (o.timeout != d.timeout) line("timeout(" + num(o.timeout) + ")");
  if (!o.multiprocessing_context.empty())
    line("multiprocessingContext(" + pyString(o.multiprocessing_context) + ")  // export only");
  static const char* samplers[] = {"Sequential", "Random", "RandomWithReplacement", "Distributed", "Weighted"};
  if (o.sampler_type != d.sampler_type)
    line(std::string("sampler(stoker::SamplerType::") + samplers[static_cast<int>(o.sampler_type)] + ")");
  if (!o.weights.empty())
    line("weights(stoker::loadWeightsFile(" + pyString(weightsFile) + "))  // " + std::to_string(o.weights.size()) +
         " weights");
  if (o.num_samples != d.num_samples) line("numSamples(" + std::to_string(o.num_samples) + ")");
  static const char* formats[] = {"Auto", "Nchw", "Nhwc"};
  if (o.memory_format != d.memory_format)
    line(std::string("memoryFormat(stoker::MemoryFormat::") + formats[static_cast<int>(o.memory_format)] + ")");
  if (o.non_blocking != d.non_blocking) line("nonBlocking(" + b(o.non_blocking) + ")");
  if (o.generator_seed != d.generator_seed) line("generatorSeed(" + std::to_string(o.generator_seed) + "u)");
  if (o.enable_transforms != d.enable_transforms) line("enableTransforms(" + b(o.enable_transforms) + ")");
  if (!o.transforms.empty()) line("transforms(" + pyString(o.transforms) + ")");  // JSON escaping is valid C++ here
  static const char* normalizeOn[] = {"Auto", "Host", "Device"};
  if (o.normalize_on != d.normalize_on)
    line(std::string("normalizeOn(stoker::NormalizeOn::") + normalizeOn[static_cast<int>(o.normalize_on)] + ")");
  if (o.skip_bad_samples != d.skip_bad_samples) line("skipBadSamples(" + b(o.skip_bad_samples) + ")");
  if (o.collate_buffer_size != d.collate_buffer_size) line("collateBufferSize(" + std::to_string(o.collate_buffer_size) + ")");
  if (o.vram_max_usage != d.vram_max_usage) line("vramMaxUsage(" + num(o.vram_max_usage) + ")");
  if (o.reuse_buffers != d.reuse_buffers) line("reuseBuffers(" + b(o.reuse_buffers) + ")");
  if (o.telemetry_interval_ms != d.telemetry_interval_ms)
    line("telemetryIntervalMs(" + std::to_string(o.telemetry_interval_ms) + ")");
  s << "      .build();\n}\n\n"
    << "// Runs `epochs` epochs of `dataset` (e.g. stoker::openDataset(\"fashion-mnist\")) on " << device << ".\n"
    << "void feedEpochs(std::shared_ptr<stoker::Dataset> dataset, std::int64_t epochs) {\n"
    << "  stoker::Loader loader(std::move(dataset), stokerOptions(), stoker::DeviceSpec::parse(" << pyString(device)
    << "));\n"
    << "  for (std::int64_t epoch = 0; epoch < epochs; ++epoch)\n"
    << "    for (const stoker::Batch& batch : loader.epoch(epoch)) {\n"
    << "      (void)batch;  // train(batch[\"images\"], batch[\"labels\"]);\n"
    << "    }\n}\n";
  return s.str();
}

}  // namespace stoker
