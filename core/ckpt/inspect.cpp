#include "ckpt/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ckpt/layout_readers.h"
#include "io/pt_file.h"
#include "io/safetensors_file.h"
#include "util/error.h"
#include "util/file_exists.h"

namespace stoker {
namespace fs = std::filesystem;

std::uint64_t CheckpointInfo::totalBytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.nbytes;
  return n;
}

const LogicalTensor* CheckpointInfo::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string formatName(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::Safetensors: return "safetensors";
    case CheckpointFormat::Pt: return "pt";
    case CheckpointFormat::Ranks: return "ranks";
    case CheckpointFormat::Hf: return "hf";
    case CheckpointFormat::Dcp: return "dcp";
  }
  return "unknown";
}

LogicalTensor logicalTensor(std::string name, Dtype dtype, std::vector<std::int64_t> shape, std::uint64_t nbytes) {
  LogicalTensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = nbytes;
  return t;
}

int addFile(CheckpointInfo& info, const std::string& path) {
  info.files.push_back(path);
  return static_cast<int>(info.files.size() - 1);
}

TensorPiece wholeTensorPiece(int file, const SafetensorsFile& f, const SafetensorsEntry& e) {
  TensorPiece p;
  p.file = file;
  p.dataOffset = f.header().dataStart() + e.begin;
  p.start.assign(e.shape.size(), 0);
  p.shape = e.shape;
  return p;
}

namespace {

bool looksLikeZip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  return in.gcount() == 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
}

void readSafetensorsFile(const std::string& path, CheckpointInfo& info) {
  info.format = CheckpointFormat::Safetensors;
  SafetensorsFile f = SafetensorsFile::open(path);
  int file = addFile(info, path);
  for (const auto& e : f.tensors()) {
    LogicalTensor t = logicalTensor(e.name, e.dtype, e.shape, e.nbytes());
    t.pieces.push_back(wholeTensorPiece(file, f, e));
    info.tensors.push_back(std::move(t));
  }
  std::sort(info.tensors.begin(), info.tensors.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  info.metadata = f.metadata();
}

void readPtFile(const std::string& path, CheckpointInfo& info) {
  info.format = CheckpointFormat::Pt;
  info.pt = std::make_shared<PtFile>(PtFile::open(path));
  int file = addFile(info, path);
  const auto& list = info.pt->tensors();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& pt = list[i];
    LogicalTensor t = logicalTensor(pt.name, pt.ref.dtype, pt.ref.size, pt.nbytes());
    TensorPiece p;
    p.file = file;
    p.start.assign(pt.ref.size.size(), 0);
    p.shape = pt.ref.size;
    p.ptIndex = i;
    if (auto offset = info.pt->inPlaceOffset(pt))
      p.dataOffset = *offset;
    else
      p.loadFromPt = true;
    t.pieces.push_back(std::move(p));
    info.tensors.push_back(std::move(t));
  }
  info.metadata = info.pt->extras();
}

// A directory: which layout is it?
void readDirectory(const std::string& dir, CheckpointInfo& info) {
  const fs::path d(dir);
  if (fileExists(d / "metadata.json")) return readRanksDirectory(dir, info);
  if (fileExists(d / ".metadata")) return readDcpDirectory(dir, info);
  if (fileExists(d / "model.safetensors.index.json"))
    return readHfIndex((d / "model.safetensors.index.json").string(), info);
  std::vector<fs::path> indexes;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(d, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 24 && name.compare(name.size() - 24, 24, ".safetensors.index.json") == 0)
      indexes.push_back(entry.path());
  }
  if (indexes.size() == 1) return readHfIndex(indexes.front().string(), info);
  if (indexes.size() > 1) throwBadInput(dir, "holds several *.safetensors.index.json files; name the one to use");
  if (fileExists(d / "model.safetensors")) {
    readSafetensorsFile((d / "model.safetensors").string(), info);
    return;
  }
  if (fileExists(d / "model.pt")) {
    readPtFile((d / "model.pt").string(), info);
    return;
  }
  bool distcp = false;
  for (const auto& entry : fs::directory_iterator(d, ec))
    distcp = distcp || entry.path().extension() == ".distcp";
  if (distcp) throwBadInput(dir, "holds .distcp files but no .metadata: an incomplete DCP checkpoint "
                                 "(DCP writes .metadata last, after every rank finished)");
  throwBadInput(dir, "is not a checkpoint directory: expected metadata.json (ranks layout), "
                     ".metadata (PyTorch DCP), model.safetensors.index.json (HF shards), model.safetensors or model.pt");
}

}  // namespace

CheckpointInfo inspectCheckpoint(const std::string& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throwBadInput(path, "no such file or directory");

  CheckpointInfo info;
  info.path = path;
  if (fs::is_directory(status)) {
    readDirectory(path, info);
    return info;
  }
  const std::string name = fs::path(path).filename().string();
  if (name.size() > 11 && name.compare(name.size() - 11, 11, ".index.json") == 0) {
    readHfIndex(path, info);
    return info;
  }
  if (name == "metadata.json") {
    readRanksDirectory(fs::path(path).parent_path().string(), info);
    return info;
  }
  if (name == ".metadata") {
    readDcpDirectory(fs::path(path).parent_path().string(), info);
    return info;
  }
  const std::string ext = fs::path(path).extension().string();
  const bool pt = ext == ".pt" || ext == ".pth" || (ext != ".safetensors" && looksLikeZip(path));
  if (pt)
    readPtFile(path, info);
  else
    readSafetensorsFile(path, info);
  return info;
}

void requireConsistent(const CheckpointInfo& info) {
  if (info.problems.empty()) return;
  std::string reason = info.problems.front();
  if (info.problems.size() > 1)
    reason += " (and " + std::to_string(info.problems.size() - 1) + " more problem" +
              (info.problems.size() > 2 ? "s" : "") + "; see stoker ckpt inspect)";
  throwBadInput(info.path, reason);
}

}  // namespace stoker
