#include "util/mapped_file.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

namespace stoker {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwIo(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throwIo(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throwBadInput(path, "not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<std::size_t>(st.st_size);
  if (file->size_ > 0) {
    // Private and writable: tensors handed out over the mapping may be
    // modified in place by their users; those pages are copied on write and
    // the file itself never changes.
    // MAP_NORESERVE: a private writable mapping is otherwise charged in full against the commit
    // limit, and a file larger than RAM + swap (a 30 GB shard, a TB token file) could not be
    // opened at all ("Cannot allocate memory"). Only pages a user writes take memory.
    void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throwIo(path, "cannot map", err);
    }
    file->data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return file;
}

std::shared_ptr<const MappedFile> MappedFile::fromBytes(std::string path, std::vector<std::uint8_t> bytes) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(path);
  file->owned_ = std::move(bytes);
  file->size_ = file->owned_.size();
  file->data_ = file->owned_.data();
  return file;
}

MappedFile::~MappedFile() {
  if (data_ && owned_.empty()) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace stoker
