#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli_output.h"
#include "commands.h"
#include "data/fashion_mnist.h"
#include "io/dtype.h"
#include "io/safetensors_writer.h"
#include "util/error.h"

namespace stoker {
namespace {

struct DatasetArgs {
  std::string spec = "fashion-mnist";
  std::string split = "train";
  std::string out;
  bool json = false;
};

// "fashion-mnist" or "fashion-mnist:DIR"; other datasets arrive with the loader.
LabeledImages loadDataset(const DatasetArgs& a) {
  std::string name = a.spec, dir = kFashionMnistDefaultDir;
  if (auto colon = a.spec.find(':'); colon != std::string::npos) {
    name = a.spec.substr(0, colon);
    dir = a.spec.substr(colon + 1);
  }
  if (name != "fashion-mnist") throwBadInput("--dataset " + a.spec, "unknown dataset (known: fashion-mnist[:DIR])");
  return loadFashionMnist(dir, a.split == "test" ? Split::Test : Split::Train);
}

}  // namespace

void addDatasetCommands(CLI::App& app, int& exitCode) {
  auto* dataset = app.add_subcommand("dataset", "Read datasets and export them as safetensors");
  dataset->require_subcommand(1);
  auto args = std::make_shared<DatasetArgs>();

  auto* info = dataset->add_subcommand("info", "Load a dataset and summarise it");
  info->add_option("NAME", args->spec, "fashion-mnist[:DIR]")->required();
  info->add_option("--split", args->split, "train or test")->check(CLI::IsMember({"train", "test"}));
  info->add_flag("--json", args->json, "print one JSON document");
  info->callback([args, &exitCode] {
    LabeledImages d = loadDataset(*args);
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

  auto* exportCmd = dataset->add_subcommand("export", "Write a dataset to one .safetensors file (images, labels)");
  exportCmd->add_option("NAME", args->spec, "fashion-mnist[:DIR]")->required();
  exportCmd->add_option("OUT", args->out, "output .safetensors file")->required();
  exportCmd->add_option("--split", args->split, "train or test")->check(CLI::IsMember({"train", "test"}));
  exportCmd->callback([args, &exitCode] {
    LabeledImages d = loadDataset(*args);
    writeSafetensors(args->out, {{"images", d.images}, {"labels", d.labels}},
                     {{"dataset", args->spec}, {"split", args->split}, {"producer", "stoker"}});
    std::printf("wrote %s (%s)\n", args->out.c_str(), humanBytes(d.images.nbytes + d.labels.nbytes).c_str());
    exitCode = 0;
  });
}

}  // namespace stoker
