#include "data/datasets/image_folder_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "net/part_cache.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/open_progress.h"
#include "util/python_str_less.h"
#include "util/read_file.h"
#include "util/run_jobs.h"

namespace stoker {
namespace fs = std::filesystem;
namespace {

constexpr int kClassListingsAtOnce = 32;  // an S3 image folder's listings, one a class

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

// The same walk over an S3 prefix: every key under `top` (ListObjectsV2, all pages), grouped by
// the "folder" before its last '/'. `listed` gets each object's size and ETag by URL.
Walk walkS3(const std::string& top, std::map<std::string, ListedObject>& listed) {
  Walk out;
  for (ListedObject& o : listS3(top + "/", false)) {
    const std::size_t slash = o.url.rfind('/');
    out[o.url.substr(0, slash)].push_back(o.url.substr(slash + 1));
    listed[o.url] = std::move(o);
  }
  return out;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, const std::string& transforms, const PartOptions& parts,
                                       std::shared_ptr<PartCache> cache)
    : EncodedImageDataset("imagefolder (" + root + ")", transforms), cache_(std::move(cache)) {
  if (isRemotePath(root)) {
    if (root.rfind("s3://", 0) != 0)
      throwBadInput(root, "an HTTP server has no listing to find classes in: imagefolder: reads local folders and s3:// prefixes "
                          "(pack the images into WebDataset shards to read them over HTTP)");
    s3_ = std::make_shared<const S3Config>(loadS3Config());  // read once, not per image
    std::string top = root;
    while (!top.empty() && top.back() == '/') top.pop_back();
    std::vector<std::string> prefixes;
    listS3(top + "/", true, &prefixes);
    for (const std::string& p : prefixes) classes_.push_back(p.substr(top.size() + 1, p.size() - top.size() - 2));
    std::sort(classes_.begin(), classes_.end(), PythonStrLess());
    if (classes_.empty())
      throwBadInput(root, "no class folders under this prefix (imagefolder expects PREFIX/<class>/<image> like torchvision's ImageFolder)");
    // The classes' listings are independent (a prefix each): they run 32 at once. One after another,
    // an ImageNet-sized bucket (1,000 classes, about 2,600 pages of 1,000 keys) took minutes at a
    // few tens of ms a page. Their threads take the opener's cancel token (util/open_progress).
    std::vector<Walk> walks(classes_.size());
    std::vector<std::map<std::string, ListedObject>> listedByClass(classes_.size());
    // The opener hears how many classes are listed (their objects are not known before).
    const OpenProgress opener = currentOpenProgress();
    OpenProgressMeter meter(opener, static_cast<std::int64_t>(classes_.size()), "class folders listed");
    forEachInParallel(static_cast<std::int64_t>(classes_.size()), kClassListingsAtOnce, [&](std::int64_t c) {
      OpenProgressScope scope(opener);
      const auto i = static_cast<std::size_t>(c);
      const std::string prefix = top + "/" + classes_[i];
      walks[i] = walkS3(prefix, listedByClass[i]);
      OpenProgressMeter::Piece(meter, prefix + "/").doneWithoutReading();
    });
    meter.finish();
    std::map<std::string, ListedObject> listed;
    for (auto& m : listedByClass) listed.merge(m);
    addClassFiles(root, [&](std::size_t c) { return std::move(walks[c]); });
    listed_.reserve(files_.size());
    std::uint64_t bytes = 0;
    for (const std::string& f : files_) {
      listed_.push_back(listed.at(f));
      bytes += listed_.back().size;
    }
    // A cached image is a part of its own size, so the byte budget holds with a cache too.
    if (!files_.empty()) parallelFetches_ = readsInFlight({parts.partSize, parts.maxInflight, nullptr}, bytes / files_.size());
    return;
  }
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
  addClassFiles(root, [&](std::size_t c) { return walk((fs::path(root) / classes_[c]).string()); });
}

// find_classes' folders in order, then make_dataset's files: each class's walk, folders sorted by
// path, files by name, kept by extension.
template <typename WalkClass>
void ImageFolderDataset::addClassFiles(const std::string& root, WalkClass walkClass) {
  std::vector<std::string> empty;
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    const std::size_t before = files_.size();
    for (auto& [folder, names] : walkClass(c)) {
      std::sort(names.begin(), names.end(), PythonStrLess());
      for (const auto& name : names)
        if (hasImageExtension(name)) {
          files_.push_back(folder.back() == '/' ? folder + name : folder + "/" + name);
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

void ImageFolderDataset::fetch(std::int64_t index, std::int64_t, std::vector<std::uint8_t>& bytes, std::int64_t& label,
                               std::string& name) const {
  name = files_[static_cast<std::size_t>(index)];
  label = labels_[static_cast<std::size_t>(index)];
  if (isRemotePath(name)) {
    const ListedObject& listed = listed_[static_cast<std::size_t>(index)];
    if (listed.size > (std::uint64_t(1) << 30)) throwBadInput(name, "larger than 1 GiB: not an image");
    // One request for an image under 1 MiB (the open's first range is the whole of it). The object
    // must still be what the listing saw: the labels and the cache's name for it rest on that.
    const auto fetchInto = [&](std::uint8_t* into) {
      const auto object = RemoteObject::open(name, std::size_t(1) << 20, s3_.get());
      if ((!listed.etag.empty() && object->etag() != listed.etag) || object->size() != listed.size)
        throwBadInput(name, "changed since the dataset was listed (ETag " + object->etag() + ", " + std::to_string(object->size()) +
                                " bytes; listed as " + listed.etag + ", " + std::to_string(listed.size) + " bytes): open the dataset again");
      object->read(0, into, static_cast<std::size_t>(listed.size));
    };
    if (cache_ && !listed.etag.empty() && listed.size > 0) {
      // The whole image is one part, named by the listing: a later read costs no request.
      const PartCache::Part part = cache_->part(cacheIdOf(targetOf(name, s3_.get()), listed.etag, listed.size), listed.size,
                                                0, static_cast<std::size_t>(listed.size), fetchInto);
      bytes.assign(part.bytes->data(), part.bytes->data() + listed.size);
      return;
    }
    bytes.resize(static_cast<std::size_t>(listed.size));
    fetchInto(bytes.data());
    return;
  }
  readWholeFile(name, std::size_t(1) << 30, bytes);  // 1 GiB: no image is that large
}

std::shared_ptr<Dataset> listImageFolderDataset(const std::string& spec, const LoaderOptions& options) {
  const std::string root = spec.substr(std::string("imagefolder:").size());
  if (root.empty()) throwBadInput(spec, "no folder after \"imagefolder:\"");
  std::shared_ptr<PartCache> cache;
  if (!options.cache_dir.empty() && isRemotePath(root))
    cache = PartCache::at(options.cache_dir, static_cast<std::uint64_t>(options.cache_limit));
  return std::make_shared<ImageFolderDataset>(root, options.transforms, PartOptions{options.part_size, options.max_inflight_parts, nullptr},
                                              std::move(cache));
}

std::shared_ptr<Dataset> openImageFolderDataset(const std::string& spec, const LoaderOptions& options) {
  parseImageTransforms(options.transforms);  // to read, an image dataset needs them (checked before the walk)
  return listImageFolderDataset(spec, options);
}

}  // namespace stoker
