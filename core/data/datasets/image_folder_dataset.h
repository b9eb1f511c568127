// data/datasets/image_folder_dataset: imagefolder:DIR -- torchvision's ImageFolder layout, one
// sub-folder per class. Classes, class_to_idx and sample order are built exactly as torchvision's
// find_classes + make_dataset build them: class folders sorted by name; inside each, os.walk's
// folders (links followed) sorted by path and their files sorted by name, kept when the name ends
// (case-insensitively) in one of torchvision's IMG_EXTENSIONS; every sort in Python's order
// (util/python_str_less: names that are not UTF-8 too). Files are read whole with pread when a
// sample is read; JPEG, PNG, WebP, TIFF and BMP decode, PPM/PGM are reported as bad samples.
#pragma once

#include <memory>
#include <vector>

#include "data/datasets/image_dataset.h"
#include "net/remote_object.h"
#include "net/s3_config.h"

namespace stoker {

class PartCache;

class ImageFolderDataset : public EncodedImageDataset {
 public:
  // `root` may be an s3:// prefix: classes are its common prefixes (ListObjectsV2 with '/'),
  // images the keys under each, a batch's fetched as many at a time as `parts` allows for images
  // of their mean size (readsInFlight). With `cache` (cache_dir), an image once fetched is read
  // from local disk by later epochs and processes, without a request: the listing's ETag and size
  // name it in the cache.
  ImageFolderDataset(const std::string& root, const std::string& transforms, const PartOptions& parts = {},
                     std::shared_ptr<PartCache> cache = nullptr);
  std::int64_t size() const override { return static_cast<std::int64_t>(files_.size()); }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(std::int64_t index) const { return files_[static_cast<std::size_t>(index)]; }
  std::int64_t label(std::int64_t index) const { return labels_[static_cast<std::size_t>(index)]; }

 protected:
  void fetch(std::int64_t index, std::int64_t epoch, std::vector<std::uint8_t>& bytes, std::int64_t& label,
             std::string& name) const override;

 private:
  template <typename WalkClass>
  void addClassFiles(const std::string& root, WalkClass walkClass);
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::shared_ptr<const S3Config> s3_;  // an s3:// root: how every image is signed
  std::vector<ListedObject> listed_;    // an s3:// root: by file, its size and ETag at listing
  std::shared_ptr<PartCache> cache_;
  std::vector<std::int64_t> labels_;
};

std::shared_ptr<Dataset> openImageFolderDataset(const std::string& spec, const LoaderOptions& options);
// The same, to list (openDatasetToList): without transforms when options has none.
std::shared_ptr<Dataset> listImageFolderDataset(const std::string& spec, const LoaderOptions& options);

}  // namespace stoker
