#include "ckpt/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "io/pt_file.h"
#include "io/safetensors_file.h"
#include "util/error.h"

namespace stoker {
namespace fs = std::filesystem;

std::uint64_t CheckpointInfo::totalBytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.nbytes;
  return n;
}

std::string formatName(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::Safetensors: return "safetensors";
    case CheckpointFormat::Pt: return "pt";
  }
  return "unknown";
}

namespace {

bool looksLikeZip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  return in.gcount() == 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
}

}  // namespace

CheckpointInfo inspectCheckpoint(const std::string& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throwBadInput(path, "no such file or directory");
  if (fs::is_directory(status))
    throwBadInput(path, "is a directory; ranks and HF directory layouts are not supported yet "
                        "(inspect one .safetensors or .pt file)");

  CheckpointInfo info;
  info.path = path;
  const std::string ext = fs::path(path).extension().string();
  const bool pt = ext == ".pt" || ext == ".pth" || (ext != ".safetensors" && looksLikeZip(path));
  if (pt) {
    info.format = CheckpointFormat::Pt;
    PtFile f = PtFile::open(path);
    for (const auto& t : f.tensors()) info.tensors.push_back({t.name, t.ref.dtype, t.ref.size, t.nbytes()});
    info.metadata = f.extras();
  } else {
    info.format = CheckpointFormat::Safetensors;
    SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& t : f.tensors()) info.tensors.push_back({t.name, t.dtype, t.shape, t.nbytes()});
    std::sort(info.tensors.begin(), info.tensors.end(),
              [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
    info.metadata = f.metadata();
  }
  return info;
}

}  // namespace stoker
