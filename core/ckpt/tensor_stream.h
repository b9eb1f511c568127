// ckpt/tensor_stream: reads a planned tensor's bytes from the source files in
// output order and pushes them into a sink -- a safetensors writer, a memory
// buffer, a hash. Copies without conversion go file-to-file in the kernel
// where the sink allows; conversions go through a bounded buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/dtype_convert.h"
#include "ckpt/reshard_plan.h"
#include "io/host_tensor.h"
#include "io/zip_archive.h"

namespace stoker {

class CancelToken;
class ProgressMeter;
class RemoteReadahead;

// A checkpoint's data files: local ones by file descriptors, opened on first use and shared by
// all threads (pread needs no lock); remote ones through the objects inspect opened, by range
// requests in parallel parts.
class SourceFiles {
 public:
  explicit SourceFiles(const CheckpointInfo& info);
  ~SourceFiles();
  SourceFiles(const SourceFiles&) = delete;
  SourceFiles& operator=(const SourceFiles&) = delete;
  bool isRemote(int file) const;
  // Exactly `n` bytes at `offset` of `file`; Error(Io) naming the file if it ended early.
  void read(int file, void* dst, std::uint64_t n, std::uint64_t offset);
  int fd(int file);  // local files only
  // Reads of `file` (local or remote) for what reads through a ZipReadAt: a zstd item.
  ZipReadAt reader(int file);
  const CheckpointInfo& info() const { return info_; }

 private:
  const CheckpointInfo& info_;
  std::vector<int> fds_;
  std::mutex mutex_;
  // Remote files: blocks fetched ahead of the jobs, up to 160 MiB (net/remote_readahead.h).
  std::once_flag readaheadOnce_;
  std::unique_ptr<RemoteReadahead> readahead_;
};

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void append(const void* data, std::size_t n) = 0;
  // Default: pread into a scratch buffer and append().
  virtual void appendFrom(int fd, std::uint64_t offset, std::uint64_t n, const std::string& source);
  virtual bool prefersKernelCopy() const { return false; }

 protected:
  std::vector<std::uint8_t> scratch_;
};

// Reads pieces in place with pread; .pt views and DCP items that are not
// contiguous in their storage (or compressed) are loaded whole once per output
// tensor and served from memory until it is streamed. One per thread.
class TensorStreamer {
 public:
  TensorStreamer(SourceFiles& files, std::size_t bufferBytes, const CancelToken* cancel, ProgressMeter* meter);
  // Streams `t` into `sink`; with a dtype change, converts on the way and
  // accumulates F16 overflow into `overflow`.
  void stream(const PlannedTensor& t, ByteSink& sink, F16Overflow* overflow);

 private:
  void emit(const CopyRun& run, ByteSink& sink);
  void inSteps(std::uint64_t length, std::uint64_t step, const std::function<void(std::uint64_t done, std::uint64_t n)>& append);
  void flushSmall(ByteSink& sink);
  void flushConvert(const PlannedTensor& t, ByteSink& sink, F16Overflow* overflow);
  const std::uint8_t* loadedPiece(const TensorPiece& piece);
  HostTensor gatherStrided(const TensorPiece& piece);
  void readRun(const CopyRun& run, std::uint8_t* dst);
  void check();
  std::uint8_t* buffer();  // the read buffer, allocated on first use

  SourceFiles& files_;
  std::size_t bufferBytes_;
  const CancelToken* cancel_;
  ProgressMeter* meter_;
  std::string item_;
  std::vector<std::uint8_t> remoteChunk_;  // a long run of a remote file, on its way to the sink
  // Bytes read before they go to the sink: allocated once per streamer and never zero-filled
  // (zeroing 16 MiB per job showed up as a third of a small conversion's time).
  std::unique_ptr<std::uint8_t[]> buffer_;
  std::vector<std::uint8_t> converted_;
  std::size_t used_ = 0;
  Dtype sourceDtype_ = Dtype::U8;
  // The pieces of the tensor being streamed that load whole, each loaded once: a tensor split
  // along a later dim takes every row from each of its pieces in turn, and holding only the last
  // one loaded it again for every row (an 8 MiB zstd DCP tensor in two column halves took 31 s).
  std::unordered_map<const TensorPiece*, HostTensor> loaded_;
  // Read-ahead windows per source piece: a tensor split along a later dim is
  // many short strided runs; reading each piece in large windows turns them
  // into memcpy instead of one pread per run.
  struct Window {
    const TensorPiece* piece = nullptr;
    std::uint64_t begin = 0;
    std::size_t size = 0;                   // bytes of `bytes` holding the piece from `begin`
    std::size_t capacity = 0;
    std::unique_ptr<std::uint8_t[]> bytes;  // grows, never shrinks, never zero-filled
  };
  std::vector<Window> windows_;
  std::size_t nextWindow_ = 0;
};

}  // namespace stoker
