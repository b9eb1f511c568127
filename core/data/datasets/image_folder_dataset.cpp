#include "data/datasets/image_folder_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "util/error.h"
#include "util/python_str_less.h"
#include "util/read_file.h"

namespace stoker {
namespace fs = std::filesystem;
namespace {

// torchvision.datasets.folder.IMG_EXTENSIONS
const char* const kImageExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

bool hasImageExtension(const std::string& name) {
  std::string lower = name;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext : kImageExtensions) {
    const std::size_t n = std::strlen(ext);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

// os.walk(top, followlinks=True) as {folder path: file names}, then sorted like
// sorted(os.walk(...)): by path string, in Python's order (as every sort here).
using Walk = std::map<std::string, std::vector<std::string>, PythonStrLess>;
Walk walk(const std::string& top) {
  Walk out;
  std::vector<std::string> pending{top};
  while (!pending.empty()) {
    const std::string dir = pending.back();
    pending.pop_back();
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec) throw Error(ErrorKind::Io, dir, ec.message());
    auto& files = out[dir];
    for (; it != end; it.increment(ec)) {
      if (ec) throw Error(ErrorKind::Io, dir, ec.message());
      const std::string name = it->path().filename().string();
      std::error_code sec;
      if (it->is_directory(sec)) {  // follows links, as followlinks=True
        if (out.count(it->path().string()) == 0) pending.push_back(it->path().string());
      } else {
        files.push_back(name);
      }
    }
  }
  return out;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, const std::string& transforms)
    : EncodedImageDataset("imagefolder (" + root + ")", transforms) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw Error(ErrorKind::Io, root, ec ? ec.message() : "not a folder");
  // find_classes: sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (it->is_directory(sec)) classes_.push_back(it->path().filename().string());
  }
  if (ec) throw Error(ErrorKind::Io, root, ec.message());
  std::sort(classes_.begin(), classes_.end(), PythonStrLess());
  if (classes_.empty()) throwBadInput(root, "no class folders (imagefolder expects ROOT/<class>/<image> like torchvision's ImageFolder)");
  std::vector<std::string> empty;
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    const std::size_t before = files_.size();
    for (auto& [folder, names] : walk((fs::path(root) / classes_[c]).string())) {
      std::sort(names.begin(), names.end(), PythonStrLess());
      for (const auto& name : names)
        if (hasImageExtension(name)) {
          files_.push_back((fs::path(folder) / name).string());
          labels_.push_back(static_cast<std::int64_t>(c));
        }
    }
    if (files_.size() == before) empty.push_back(classes_[c]);
  }
  if (!empty.empty()) {
    std::string list;
    for (const auto& e : empty) list += (list.empty() ? "" : ", ") + e;
    throwBadInput(root, "no image files in class folder" + std::string(empty.size() > 1 ? "s " : " ") + list +
                            " (torchvision's ImageFolder refuses that too; extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)");
  }
}

void ImageFolderDataset::fetch(std::int64_t index, std::vector<std::uint8_t>& bytes, std::int64_t& label, std::string& name) const {
  name = files_[static_cast<std::size_t>(index)];
  label = labels_[static_cast<std::size_t>(index)];
  readWholeFile(name, std::size_t(1) << 30, bytes);  // 1 GiB: no image is that large
}

std::shared_ptr<Dataset> listImageFolderDataset(const std::string& spec, const LoaderOptions& options) {
  const std::string root = spec.substr(std::string("imagefolder:").size());
  if (root.empty()) throwBadInput(spec, "no folder after \"imagefolder:\"");
  return std::make_shared<ImageFolderDataset>(root, options.transforms);
}

std::shared_ptr<Dataset> openImageFolderDataset(const std::string& spec, const LoaderOptions& options) {
  parseImageTransforms(options.transforms);  // to read, an image dataset needs them (checked before the walk)
  return listImageFolderDataset(spec, options);
}

}  // namespace stoker
