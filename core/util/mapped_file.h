// util/mapped_file: a read-only mmap of a whole file. Readers hand out views
// into it; a shared_ptr to the mapping keeps it alive as long as any view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace stoker {

class MappedFile {
 public:
  // Maps `path` read-only. Throws Error(Io) if it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  // The same view over bytes already in memory (a remote file fetched whole): `path` names them.
  static std::shared_ptr<const MappedFile> fromBytes(std::string path, std::vector<std::uint8_t> bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::uint8_t> owned_;  // fromBytes: the bytes (nothing is mapped)
};

}  // namespace stoker
