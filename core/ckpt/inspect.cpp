#include "ckpt/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ckpt/layout_readers.h"
#include "io/pt_file.h"
#include "io/safetensors_file.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
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

// A safetensors file in S3 or behind HTTP(S): its header alone, with one range request when it
// fits in the first 64 KiB (most do) and a second one otherwise -- never the tensors' bytes.
void readRemoteSafetensors(const std::string& url, CheckpointInfo& info) {
  constexpr std::size_t kFirst = 64 << 10;
  constexpr std::uint64_t kMaxHeader = 100ull << 20;  // safetensors' own limit
  auto object = RemoteObject::open(url, kFirst);
  const std::vector<std::uint8_t>& head = object->head();
  if (head.size() < 8) throwBadInput(url, "too short for a safetensors file (" + std::to_string(object->size()) + " bytes)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | head[static_cast<std::size_t>(i)];
  if (n > kMaxHeader || 8 + n > object->size())
    throwBadInput(url, "not a safetensors file: its header length (" + std::to_string(n) + ") is past 100 MiB or its end");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(8 + n));
  object->read(0, bytes.data(), bytes.size());
  info.format = CheckpointFormat::Safetensors;
  const SafetensorsHeader header = parseSafetensorsHeader(bytes.data(), bytes.size(), object->size(), url);
  const int file = addFile(info, url);
  for (const auto& e : header.tensors) {
    LogicalTensor t = logicalTensor(e.name, e.dtype, e.shape, e.nbytes());
    TensorPiece p;
    p.file = file;
    p.dataOffset = header.dataStart() + e.begin;
    p.start.assign(e.shape.size(), 0);
    p.shape = e.shape;
    t.pieces.push_back(std::move(p));
    info.tensors.push_back(std::move(t));
  }
  std::sort(info.tensors.begin(), info.tensors.end(), [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  info.metadata = header.metadata;
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
  if (isRemotePath(path)) {
    if (path.size() < 12 || path.compare(path.size() - 12, 12, ".safetensors") != 0)
      throwBadInput(path, "a remote checkpoint is read as one .safetensors file (HF index, .pt, DCP and rank layouts are "
                          "read from local folders: download them first)");
    CheckpointInfo info;
    info.path = path;
    readRemoteSafetensors(path, info);
    return info;
  }
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

void requireLocalFiles(const CheckpointInfo& info, const std::string& what) {
  for (const std::string& f : info.files)
    if (isRemotePath(f))
      throwBadInput(redactedUrl(f), what + " reads every tensor from local files; a remote checkpoint is inspected by its header "
                                           "only (download it first, e.g. curl -O or aws s3 cp)");
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
