#include "ckpt/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "ckpt/layout_readers.h"
#include "io/byte_order.h"
#include "io/pt_file.h"
#include "io/safetensors_file.h"
#include "net/http_transfer.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
#include "util/ends_with.h"
#include "util/error.h"
#include "util/file_exists.h"
#include "util/run_jobs.h"

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

int addFile(CheckpointInfo& info, const std::string& path, std::shared_ptr<const RemoteObject> remote) {
  info.files.push_back(path);
  info.remote.resize(info.files.size());
  info.remote.back() = std::move(remote);
  return static_cast<int>(info.files.size() - 1);
}

TensorPiece wholeTensorPiece(int file, const SafetensorsHeader& h, const SafetensorsEntry& e) {
  TensorPiece p;
  p.file = file;
  p.dataOffset = h.dataStart() + e.begin;
  p.start.assign(e.shape.size(), 0);
  p.shape = e.shape;
  return p;
}

// A safetensors file in S3 or behind HTTP(S): its header alone, with one range request when it
// fits in the first 64 KiB (most do) and a second one otherwise -- never the tensors' bytes.
constexpr std::size_t kFirstRemoteBytes = 64 << 10;

HfShard remoteSafetensorsHeader(const std::string& url, std::shared_ptr<const RemoteObject> object) {
  if (!object) object = RemoteObject::open(url, kFirstRemoteBytes);
  const auto& head = object->head();
  if (head.size() < 8) throwBadInput(url, "too short for a safetensors file (" + std::to_string(object->size()) + " bytes)");
  const std::uint64_t n = loadLittleEndian<std::uint64_t>(head.data());
  if (n > kSafetensorsMaxHeaderBytes || 8 + n > object->size())
    throwBadInput(url, "not a safetensors file: its header length (" + std::to_string(n) + ") is past 100 MB or its end");
  std::vector<std::uint8_t> bytes;
  const std::uint8_t* at = head.data();
  if (8 + n > head.size()) {
    bytes.resize(static_cast<std::size_t>(8 + n));
    object->read(0, bytes.data(), bytes.size());
    at = bytes.data();
  }
  HfShard shard{url, parseSafetensorsHeader(at, 8 + n, object->size(), url), object};
  return shard;
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
    t.pieces.push_back(wholeTensorPiece(file, f.header(), e));
    info.tensors.push_back(std::move(t));
  }
  std::sort(info.tensors.begin(), info.tensors.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  info.metadata = f.metadata();
}

// A torch.save zip, local or (with `remote`, which `path` names) in S3 or behind HTTP(S).
void readPtFile(const std::string& path, CheckpointInfo& info, std::shared_ptr<const RemoteObject> remote = nullptr) {
  info.format = CheckpointFormat::Pt;
  info.pt = std::make_shared<PtFile>(remote ? PtFile::open(remote) : PtFile::open(path));
  int file = addFile(info, path, remote);
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


void readRemoteSafetensors(const std::string& url, CheckpointInfo& info,
                           std::shared_ptr<const RemoteObject> object = nullptr) {
  HfShard shard = remoteSafetensorsHeader(url, std::move(object));
  info.format = CheckpointFormat::Safetensors;
  const int file = addFile(info, url, shard.remote);
  for (const auto& e : shard.header.tensors) {
    LogicalTensor t = logicalTensor(e.name, e.dtype, e.shape, e.nbytes());
    t.pieces.push_back(wholeTensorPiece(file, shard.header, e));
    info.tensors.push_back(std::move(t));
  }
  std::sort(info.tensors.begin(), info.tensors.end(), [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
  info.metadata = shard.header.metadata;
}

// An HF index in S3 or behind HTTP(S): the index fetched whole, then every shard's header, a few
// shards at a time (a 30-shard model costs about 31 requests, none of them for tensor bytes).
void readRemoteHfIndex(const std::string& url, std::shared_ptr<const RemoteObject> index, CheckpointInfo& info) {
  const std::string text = index->whole(64ull << 20, "an HF index");
  const std::string folder = url.substr(0, url.rfind('/') + 1);
  readHfIndexText(text, url, [&](const std::vector<std::string>& names) {
    std::vector<std::optional<HfShard>> shards(names.size());
    const bool http = RemoteUrl::parse(url).scheme != RemoteUrl::Scheme::S3;
    forEachInParallel(static_cast<std::int64_t>(names.size()), 8, [&](std::int64_t i) {
      // An s3:// key is encoded when the request is made; an http(s) path is a URL already.
      const std::string& name = names[static_cast<std::size_t>(i)];
      const std::string shardUrl = folder + (http ? percentEncode(name, true) : name);
      try {
        shards[static_cast<std::size_t>(i)] = remoteSafetensorsHeader(shardUrl);
      } catch (const Error& e) {
        if (!isNotFound(e)) throw;  // a shard the server does not have is a problem of the index
      }
    });
    return shards;
  }, info);
}

// A remote file that is neither named .safetensors nor an index: a torch.save zip (`model.pt`,
// HF's `pytorch_model.bin`) when it starts like one, else a safetensors file.
void readRemoteFile(const std::string& url, CheckpointInfo& info) {
  auto object = RemoteObject::open(url, kFirstRemoteBytes);  // a .pt's data.pkl usually comes with it
  const auto& head = object->head();
  if (head.size() >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4)
    return readPtFile(url, info, object);
  if (head.size() >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)  // a pickle's PROTO opcode
    throwBadInput(url, "legacy (pre-1.6) torch.save format; re-save it with a current torch.save");
  try {
    readRemoteSafetensors(url, info, std::move(object));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput || e.subject() != redactedUrl(url)) throw;  // an Error's subject is redacted
    throwBadInput(url, "is neither a torch.save zip (.pt) nor a safetensors file (as safetensors: " + e.reason() + ")");
  }
}

// What a remote path names: a .safetensors file, an *.index.json, a DCP .metadata, a ranks
// metadata.json, a folder URL ending in '/' (metadata.json there, else .metadata, else
// model.safetensors.index.json, else model.safetensors, else model.pt: the local order), or
// another file (a .pt by its zip signature, else safetensors).
void readRemoteCheckpoint(const std::string& url, CheckpointInfo& info) {
  constexpr std::size_t kIndexHead = 1 << 20;
  if (endsWith(url, ".safetensors")) return readRemoteSafetensors(url, info);
  if (endsWith(url, ".index.json")) return readRemoteHfIndex(url, RemoteObject::open(url, kIndexHead), info);
  if (endsWith(url, "/.metadata")) return readDcpDirectory(url.substr(0, url.size() - 9), info);
  if (endsWith(url, "/metadata.json")) return readRanksDirectory(url.substr(0, url.size() - 13), info);
  if (endsWith(url, "/")) {
    // Each layout's file in the local order. A missing one is a 404, or a 403 where the caller may
    // not list the bucket (S3 answers so for a missing key then): either way the next is tried, and
    // a 403 is the error only when none of them is there.
    std::optional<Error> forbidden;
    auto found = [&](const std::function<void()>& read) {
      try {
        read();
        return true;
      } catch (const Error& e) {
        info = CheckpointInfo{};  // nothing of a layout that was not there
        info.path = url;
        if (isForbidden(e) && !forbidden) forbidden = e;
        if (!isNotFound(e) && !isForbidden(e)) throw;  // a missing rank or data file is named otherwise
        return false;
      }
    };
    if (found([&] { readRanksDirectory(url, info); }) || found([&] { readDcpDirectory(url, info); }) ||
        found([&] {
          readRemoteHfIndex(url + "model.safetensors.index.json",
                            RemoteObject::open(url + "model.safetensors.index.json", kIndexHead), info);
        }) ||
        found([&] { readRemoteSafetensors(url + "model.safetensors", info); }) ||
        found([&] { readRemoteFile(url + "model.pt", info); }))
      return;
    if (forbidden) throw *forbidden;
    throwBadInput(url, "holds none of metadata.json (ranks), .metadata (DCP), model.safetensors.index.json, "
                       "model.safetensors and model.pt");
  }
  readRemoteFile(url, info);
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
    CheckpointInfo info;
    info.path = path;
    readRemoteCheckpoint(path, info);
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

void requireConsistent(const CheckpointInfo& info) {
  if (info.problems.empty()) return;
  std::string reason = info.problems.front();
  if (info.problems.size() > 1)
    reason += " (and " + std::to_string(info.problems.size() - 1) + " more problem" +
              (info.problems.size() > 2 ? "s" : "") + "; see stoker ckpt inspect)";
  throwBadInput(info.path, reason);
}

}  // namespace stoker
