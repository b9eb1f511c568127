#include "io/host_tensor_torch.h"
#include "ckpt_fixtures.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <filesystem>

#include "ckpt/ranks_metadata.h"
#include "ckpt/reshard_plan.h"
#include "io/host_tensor.h"
#include "io/pt_file.h"
#include "io/safetensors_file.h"
#include "io/safetensors_writer.h"

namespace stoker::test {
namespace fs = std::filesystem;

void writeRanks(const std::string& dir, const TensorMap& full, int ranks,
                const std::map<std::string, RankSplit>& splits) {
  fs::create_directories(dir);
  ShardSpecs specs;
  std::vector<std::vector<std::pair<std::string, HostTensor>>> files(ranks);
  for (const auto& [name, t] : full) {
    RankSplit split;
    if (auto it = splits.find(name); it != splits.end()) split = it->second;
    else if (t.dim() > 0) split.dim = 0;
    ShardSpec spec;
    spec.fullShape = t.sizes().vec();
    spec.shardDim = split.dim;
    if (split.dim) {
      spec.shardSizes = split.sizes.empty() ? evenSplit(t.size(*split.dim), ranks) : split.sizes;
    }
    std::int64_t offset = 0;
    for (int r = 0; r < ranks; ++r) {
      at::Tensor part = t;
      if (split.dim) {
        part = t.narrow(*split.dim, offset, spec.shardSizes[r]);
        offset += spec.shardSizes[r];
      }
      files[r].emplace_back(name, hostTensorFromTorch(part.contiguous()));
    }
    specs[name] = spec;
  }
  for (int r = 0; r < ranks; ++r)
    writeSafetensors(dir + "/rank_" + std::to_string(r) + ".safetensors", files[r]);
  QFile meta(QString::fromStdString(dir + "/metadata.json"));
  meta.open(QIODevice::WriteOnly);
  meta.write(QByteArray::fromStdString(ranksMetadataJson(ranks, specs)));
}

void writeSingle(const std::string& dir, const TensorMap& full) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, HostTensor>> tensors;
  for (const auto& [name, t] : full) tensors.emplace_back(name, hostTensorFromTorch(t.contiguous()));
  writeSafetensors(dir + "/model.safetensors", tensors);
}

namespace {

QJsonObject readJson(const std::string& path) {
  QFile f(QString::fromStdString(path));
  f.open(QIODevice::ReadOnly);
  return QJsonDocument::fromJson(f.readAll()).object();
}

TensorMap readSafetensors(const std::string& path) {
  TensorMap out;
  SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& e : f.tensors()) out[e.name] = f.tensor(e.name).clone();
  return out;
}

}  // namespace

TensorMap readFull(const std::string& path) {
  if (fs::is_directory(path) && fs::exists(path + "/metadata.json")) {
    QJsonObject meta = readJson(path + "/metadata.json");
    const int ranks = meta["num_ranks"].toInt();
    std::vector<TensorMap> parts;
    for (int r = 0; r < ranks; ++r) parts.push_back(readSafetensors(path + "/rank_" + std::to_string(r) + ".safetensors"));
    TensorMap out;
    const QJsonObject specs = meta["tensor_specs"].toObject();
    for (auto it = specs.begin(); it != specs.end(); ++it) {
      const std::string name = it.key().toStdString();
      const QJsonValue dim = it.value().toObject()["shard_dim"];
      if (dim.isNull()) {
        out[name] = parts[0].at(name);
        continue;
      }
      std::vector<at::Tensor> pieces;
      for (auto& p : parts) pieces.push_back(p.at(name));
      out[name] = at::cat(pieces, dim.toInt());
    }
    return out;
  }
  if (fs::is_directory(path) && fs::exists(path + "/model.safetensors.index.json")) {
    QJsonObject map = readJson(path + "/model.safetensors.index.json")["weight_map"].toObject();
    TensorMap out;
    std::map<std::string, TensorMap> files;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string file = it.value().toString().toStdString();
      if (!files.count(file)) files[file] = readSafetensors(path + "/" + file);
      out[it.key().toStdString()] = files[file].at(it.key().toStdString());
    }
    return out;
  }
  if (fs::is_directory(path) && fs::exists(path + "/model.pt")) return readFull(path + "/model.pt");
  if (fs::is_directory(path)) return readSafetensors(path + "/model.safetensors");
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".pt") == 0) {
    TensorMap out;
    PtFile f = PtFile::open(path);
    for (const auto& t : f.tensors()) out[t.name] = f.load(t).toTorch().clone();
    return out;
  }
  return readSafetensors(path);
}

TensorMap sampleModel(int seed) {
  at::manual_seed(seed);
  TensorMap m;
  m["embed.weight"] = at::randn({37, 8});
  m["layer.0.attn.qkv"] = at::randn({12, 10}).to(at::kHalf);
  m["layer.0.mlp.up"] = at::randn({9, 4, 6}).to(at::kBFloat16);
  m["layer.0.norm"] = at::randn({8}, at::kDouble);
  m["step"] = at::scalar_tensor(1234, at::kLong);
  m["mask"] = at::randint(0, 2, {5, 3}).to(at::kBool);
  m["codes"] = at::randint(0, 255, {7}).to(at::kByte);
  m["empty"] = at::zeros({0, 4});
  m["tiny"] = at::arange(2, at::kInt);  // fewer rows than most world sizes
  return m;
}

std::string differences(const TensorMap& a, const TensorMap& b) {
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return "\"" + name + "\" missing from the second";
    const at::Tensor& u = it->second;
    if (t.scalar_type() != u.scalar_type()) return "\"" + name + "\" dtype differs";
    if (t.sizes() != u.sizes()) return "\"" + name + "\" shape differs";
    if (!at::equal(t.contiguous(), u.contiguous())) return "\"" + name + "\" values differ";
  }
  for (const auto& [name, t] : b)
    if (!a.count(name)) return "\"" + name + "\" missing from the first";
  return "";
}

}  // namespace stoker::test
