// util/atomic_file: write a file under a temporary name and only rename it to
// its final name after fsync, so a crash, a cancel or a full disk never leaves
// a half-written file that looks complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.stoker-tmp-<pid>-<n>" next to `finalPath`.
  explicit AtomicFile(std::string finalPath);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Buffered append; throws Error(Io) on failure (ENOSPC included).
  void write(const void* data, std::size_t n);
  std::uint64_t bytesWritten() const { return written_; }

  // Flushes, fsyncs, renames to the final name and fsyncs the directory.
  void commit();

  const std::string& finalPath() const { return finalPath_; }
  const std::string& tempPath() const { return tempPath_; }

 private:
  void flushBuffer();
  void writeAll(const void* data, std::size_t n);

  std::string finalPath_;
  std::string tempPath_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
  std::vector<std::uint8_t> buffer_;
};

}  // namespace stoker
