#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_output.h"
#include "cli_progress.h"
#include "commands.h"
#include "data/dataset.h"
#include "data/datasets/image_dataset.h"
#include "data/datasets/image_folder_dataset.h"
#include "data/datasets/token_datasets.h"
#include "data/datasets/web_dataset.h"
#include "data/fashion_mnist.h"
#include "io/dtype.h"
#include "io/host_tensor_torch.h"
#include "io/safetensors_writer.h"
#include "net/remote_url.h"
#include "util/error.h"

namespace stoker {
namespace {

struct DatasetArgs {
  std::string spec = "fashion-mnist";
  std::string split = "train";
  std::string out;
  std::string transforms;
  std::int64_t limit = -1;
  std::uint64_t seed = 0;
  bool json = false;
};

bool isFashionMnist(const std::string& spec) { return spec == "fashion-mnist" || spec.rfind("fashion-mnist:", 0) == 0; }

// Only Fashion-MNIST's files hold two splits; elsewhere a split is its own folder or file, and
// --split test silently summarised or exported the training data.
void refuseSplitUnlessFashionMnist(const std::string& spec, bool splitGiven) {
  if (splitGiven && !isFashionMnist(spec))
    throwBadInput("--split", "only fashion-mnist has splits here; give the split's own folder or file as the spec "
                             "(e.g. imagefolder:DIR/val)");
}

// Fashion-MNIST keeps its own path here: both splits, label counts.
LabeledImages loadFashionMnistSplit(const DatasetArgs& a) {
  const std::string dir = a.spec.size() > 14 ? a.spec.substr(14) : kFashionMnistDefaultDir;
  return loadFashionMnist(dir, a.split == "test" ? Split::Test : Split::Train);
}

std::shared_ptr<Dataset> openForCommand(const DatasetArgs& a) {
  LoaderOptions o;
  o.transforms = a.transforms;
  return openDataset(a.spec, o);
}

std::string dtypeText(c10::ScalarType t) { return std::string(dtypeName(dtypeFromTorch(t))); }

void infoOfSpec(const DatasetArgs& a) {
  LoaderOptions o;
  o.transforms = a.transforms;
  CancelToken cancel;
  cancelOnInterrupt(cancel);
  std::shared_ptr<Dataset> ds;
  {
    OpeningProgress opening(a.json, &cancel);
    ds = openDatasetToList(a.spec, o);  // an image dataset without --transforms: listed, its images' shape not fixed
  }
  const auto* images = dynamic_cast<const EncodedImageDataset*>(ds.get());
  const bool shapeless = images && images->listOnly();
  nlohmann::json fields = nlohmann::json::array();
  for (const auto& f : ds->fields()) {
    const bool unfixed = shapeless && f.name == "images";
    fields.push_back({{"name", f.name}, {"dtype", dtypeText(f.dtype)}, {"shape", unfixed ? nlohmann::json() : nlohmann::json(f.sampleShape)},
                      {"bytes", unfixed ? nlohmann::json() : nlohmann::json(f.sampleBytes)}});
  }
  nlohmann::json doc = {{"dataset", a.spec}, {"description", ds->description()}, {"samples", ds->size()}, {"fields", fields},
                        {"sample_bytes", shapeless ? nlohmann::json() : nlohmann::json(ds->sampleBytes())}};
  std::vector<std::int64_t> counts;
  if (const auto* folder = dynamic_cast<const ImageFolderDataset*>(ds.get())) {
    counts.assign(folder->classes().size(), 0);
    for (std::int64_t i = 0; i < folder->size(); ++i) ++counts[static_cast<std::size_t>(folder->label(i))];
    doc["classes"] = folder->classes();
    doc["label_counts"] = counts;
    if (!shapeless) doc["transforms"] = folder->pipeline().transforms().text;
  }
  if (const auto* tokens = dynamic_cast<const TokenWindowDataset*>(ds.get())) doc["tokens"] = tokens->tokens();
  if (a.json) {
    printJson(doc);
    return;
  }
  if (shapeless)
    std::printf("%s: %lld samples\n", ds->description().c_str(), static_cast<long long>(ds->size()));
  else
    std::printf("%s: %lld samples, %s per sample\n", ds->description().c_str(), static_cast<long long>(ds->size()),
                humanBytes(static_cast<std::uint64_t>(ds->sampleBytes())).c_str());
  for (const auto& f : ds->fields()) {
    if (shapeless && f.name == "images")
      std::printf("  %-8s decoded size: --transforms fixes the shape and dtype\n", f.name.c_str());
    else
      std::printf("  %-8s %-4s %s\n", f.name.c_str(), dtypeText(f.dtype).c_str(), shapeText(f.sampleShape).c_str());
  }
  if (doc.contains("tokens")) std::printf("  %lld tokens\n", static_cast<long long>(doc["tokens"].get<std::int64_t>()));
  if (doc.contains("classes")) {
    std::printf("  %zu classes:", counts.size());
    for (std::size_t c = 0; c < counts.size(); ++c)
      std::printf(" %s (%lld)", doc["classes"][c].get<std::string>().c_str(), static_cast<long long>(counts[c]));
    std::printf("\n");
  }
}

// The first --limit samples in dataset order, after the transforms (epoch 0, --seed), one tensor
// per field with dim 0 = sample. The first field in the file's order streams to disk in chunks;
// the others are small enough to hold (labels, token targets).
void exportSpec(const DatasetArgs& a) {
  auto ds = openForCommand(a);
  const std::int64_t n = a.limit < 0 ? ds->size() : std::min(a.limit, ds->size());
  if (n < 1) throwBadInput("--limit", "nothing to export (the dataset has " + std::to_string(ds->size()) + " samples)");
  const auto& fields = ds->fields();
  std::vector<TensorSpec> specs;
  for (const auto& f : fields) {
    std::vector<std::int64_t> shape{n};
    shape.insert(shape.end(), f.sampleShape.begin(), f.sampleShape.end());
    specs.push_back({f.name, dtypeFromTorch(f.dtype), shape});
  }
  std::map<std::string, std::string> meta = {{"dataset", redactedUrl(a.spec)}, {"producer", "stoker"}, {"seed", std::to_string(a.seed)}};
  if (!a.transforms.empty()) meta["transforms"] = a.transforms;
  SafetensorsWriter writer(a.out, specs, meta);
  const std::string first = writer.writeOrder().front().name;
  std::vector<std::vector<std::uint8_t>> held(fields.size());
  std::size_t streamed = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].name == first) streamed = f;
    else held[f].resize(static_cast<std::size_t>(n * fields[f].sampleBytes));
  }
  const std::int64_t chunk = 64;
  std::vector<std::uint8_t> chunkBuffer(static_cast<std::size_t>(chunk * fields[streamed].sampleBytes));
  std::vector<std::int64_t> indices;
  std::vector<std::uint8_t*> dst(fields.size());
  for (std::int64_t at = 0; at < n; at += chunk) {
    const std::int64_t count = std::min(chunk, n - at);
    indices.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) indices[static_cast<std::size_t>(i)] = at + i;
    for (std::size_t f = 0; f < fields.size(); ++f)
      dst[f] = f == streamed ? chunkBuffer.data() : held[f].data() + at * fields[f].sampleBytes;
    ds->readSamples(indices.data(), count, dst.data(), ReadContext{a.seed, 0, nullptr});
    writer.append(chunkBuffer.data(), static_cast<std::size_t>(count * fields[streamed].sampleBytes));
  }
  for (const auto& spec : writer.writeOrder()) {
    if (spec.name == first) continue;
    for (std::size_t f = 0; f < fields.size(); ++f)
      if (fields[f].name == spec.name) writer.write(spec.name, held[f].data(), held[f].size());
  }
  writer.finish();
  std::printf("wrote %s: %lld samples of %s (%s)\n", a.out.c_str(), static_cast<long long>(n), ds->description().c_str(),
              humanBytes(static_cast<std::uint64_t>(n * ds->sampleBytes())).c_str());
}

}  // namespace

void addDatasetCommands(CLI::App& app, int& exitCode) {
  auto* dataset = app.add_subcommand("dataset", "Read datasets and export them as safetensors");
  dataset->require_subcommand(1);
  auto args = std::make_shared<DatasetArgs>();

  const std::string specHelp = "a dataset spec: fashion-mnist[:DIR], imagefolder:DIR, tokens:FILE.bin[,dtype=][,ctx=], "
                               "megatron:PREFIX[,ctx=], synthetic:..., FILE.safetensors, FILE.npy";
  auto* info = dataset->add_subcommand("info", "Open a dataset and summarise it (samples, fields, classes)");
  info->add_option("SPEC", args->spec, specHelp)->required();
  auto* infoSplit = info->add_option("--split", args->split, "fashion-mnist: train or test")->check(CLI::IsMember({"train", "test"}));
  info->add_option("--transforms", args->transforms, "image datasets: torchvision-named transforms, e.g. \"Resize(256),CenterCrop(224)\"");
  info->add_flag("--json", args->json, "print one JSON document");
  info->callback([args, infoSplit, &exitCode] {
    refuseTransformsUnlessImages(args->spec, args->transforms, "--transforms");
    refuseSplitUnlessFashionMnist(args->spec, infoSplit->count() > 0);
    if (!isFashionMnist(args->spec)) {
      infoOfSpec(*args);
      exitCode = 0;
      return;
    }
    LabeledImages d = loadFashionMnistSplit(*args);
    std::vector<std::int64_t> histogram(10, 0);
    auto* labels = reinterpret_cast<const std::int64_t*>(d.labels.data);
    for (std::int64_t i = 0; i < d.labels.shape[0]; ++i)
      if (labels[i] >= 0 && labels[i] < 10) ++histogram[static_cast<std::size_t>(labels[i])];
    if (args->json) {
      nlohmann::json doc = {{"dataset", args->spec},
                            {"split", args->split},
                            {"samples", d.images.shape[0]},
                            {"images", {{"dtype", "F32"}, {"shape", d.images.shape}}},
                            {"labels", {{"dtype", "I64"}, {"shape", d.labels.shape}}},
                            {"label_counts", histogram},
                            {"bytes", d.images.nbytes + d.labels.nbytes}};
      printJson(doc);
    } else {
      std::printf("%s (%s): %lld samples, images F32 %s, labels I64 %s, %s in memory\n",
                  args->spec.c_str(), args->split.c_str(), static_cast<long long>(d.images.shape[0]),
                  shapeText(d.images.shape).c_str(), shapeText(d.labels.shape).c_str(),
                  humanBytes(d.images.nbytes + d.labels.nbytes).c_str());
      std::printf("label counts:");
      for (auto c : histogram) std::printf(" %lld", static_cast<long long>(c));
      std::printf("\n");
    }
    exitCode = 0;
  });

  auto* exportCmd = dataset->add_subcommand(
      "export", "Write the first samples, in order and after the transforms, to one .safetensors file (one tensor per field)");
  exportCmd->add_option("SPEC", args->spec, specHelp)->required();
  exportCmd->add_option("OUT", args->out, "output .safetensors file")->required();
  auto* exportSplit =
      exportCmd->add_option("--split", args->split, "fashion-mnist: train or test")->check(CLI::IsMember({"train", "test"}));
  exportCmd->add_option("--transforms", args->transforms, "image datasets: torchvision-named transforms");
  exportCmd->add_option("--limit", args->limit, "export the first N samples (default: all)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            long long v = 0;
            std::size_t used = 0;
            try {
              v = std::stoll(text, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            return used == text.size() && v >= 1 ? std::string() : "--limit must be a whole number of samples, 1 or more (got " + text + ")";
          },
          "N >= 1"));
  exportCmd->add_option("--seed", args->seed, "seed of random transforms (epoch 0)");
  exportCmd->callback([args, exportSplit, &exitCode] {
    refuseTransformsUnlessImages(args->spec, args->transforms, "--transforms");
    refuseSplitUnlessFashionMnist(args->spec, exportSplit->count() > 0);
    if (!isFashionMnist(args->spec) || args->limit >= 0) {
      if (isFashionMnist(args->spec) && args->split == "test")
        throwBadInput("--split test", "--limit exports the train split (fashion-mnist:DIR opens train)");
      exportSpec(*args);
      exitCode = 0;
      return;
    }
    LabeledImages d = loadFashionMnistSplit(*args);
    writeSafetensors(args->out, {{"images", d.images}, {"labels", d.labels}},
                     {{"dataset", args->spec}, {"split", args->split}, {"producer", "stoker"}});
    std::printf("wrote %s (%s)\n", args->out.c_str(), humanBytes(d.images.nbytes + d.labels.nbytes).c_str());
    exitCode = 0;
  });

  auto* indexCmd = dataset->add_subcommand(
      "index", "Write each WebDataset shard's index (DALI's wds2idx format, <shard>.idx), so that wds:SHARDS,index=dali opens "
               "without reading the shards");
  indexCmd->add_option("SPEC", args->spec, "wds:SHARDS (a brace range or a glob; local, s3:// or http(s)://)")->required();
  indexCmd->add_option("--out-dir", args->out, "write the .idx files here (default: beside each local shard; needed for remote shards, "
                       "which then open with wds:SHARDS,index=dali:DIR)");
  indexCmd->add_flag("--json", args->json, "print one JSON document");
  indexCmd->callback([args, &exitCode] {
    if (args->spec.rfind("wds:", 0) != 0) throwBadInput(args->spec, "dataset index writes WebDataset indexes: give wds:SHARDS");
    CancelToken cancel;
    cancelOnInterrupt(cancel);
    std::vector<WrittenIndex> written;
    {
      OpeningProgress opening(args->json, &cancel);  // the scan is the long part
      written = writeDaliIndexes(args->spec, args->out, LoaderOptions{});
    }
    std::int64_t samples = 0;
    nlohmann::json files = nlohmann::json::array();
    for (const auto& w : written) {
      samples += w.samples;
      files.push_back({{"path", w.path}, {"samples", w.samples}});
    }
    if (args->json)
      printJson({{"dataset", args->spec}, {"indexes", files}, {"samples", samples}});
    else
      std::printf("wrote %zu index files (%lld samples)%s%s\n", written.size(), static_cast<long long>(samples),
                  args->out.empty() ? "" : " into ", args->out.c_str());
    exitCode = 0;
  });
}

}  // namespace stoker
