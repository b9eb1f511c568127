#include "ckpt/tensor_stream.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ckpt/torch_ops.h"
#include "io/pt_file.h"
#include "io/strided_gather.h"
#include "io/zstd_item.h"
#include "net/remote_readahead.h"
#include "util/error.h"
#include "util/pread_full.h"
#include "util/progress.h"

namespace stoker {
namespace {

constexpr std::uint64_t kKernelCopyMin = 64 << 10;   // shorter runs are batched through memory
constexpr std::uint64_t kProgressStep = 64ull << 20;  // long runs are split to report and cancel
constexpr std::uint64_t kRemoteChunk = 4ull << 20;  // a remote run goes to the sink this much at a time

void preadAll(int fd, void* dst, std::uint64_t n, std::uint64_t offset, const std::string& path) {
  const long long r = preadFull(fd, dst, static_cast<std::size_t>(n), offset);
  if (r < 0) throwIo(path, "read failed", errno);
  if (static_cast<std::uint64_t>(r) < n)
    throw Error(ErrorKind::Io, path, "file ended early (was it changed during the conversion?)");
}

}  // namespace

SourceFiles::SourceFiles(const CheckpointInfo& info) : info_(info), fds_(info.files.size(), -1) {
  // Many ranks means many open files: lift the soft limit to the hard one.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < info.files.size() + 256) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

SourceFiles::~SourceFiles() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

bool SourceFiles::isRemote(int file) const {
  return static_cast<std::size_t>(file) < info_.remote.size() && info_.remote[static_cast<std::size_t>(file)];
}

void SourceFiles::read(int file, void* dst, std::uint64_t n, std::uint64_t offset) {
  if (isRemote(file)) {
    // Through blocks fetched ahead (the object refuses one whose ETag changed since inspect).
    std::call_once(readaheadOnce_, [&] { readahead_ = std::make_unique<RemoteReadahead>(); });
    readahead_->read(info_.remote[static_cast<std::size_t>(file)], dst, n, offset);
    return;
  }
  preadAll(fd(file), dst, n, offset, info_.files[static_cast<std::size_t>(file)]);
}

ZipReadAt SourceFiles::reader(int file) {
  return [this, file](void* dst, std::uint64_t n, std::uint64_t at) {
    read(file, dst, n, at);
    return n;
  };
}

int SourceFiles::fd(int file) {
  if (isRemote(file))
    throw Error(ErrorKind::Internal, info_.files[static_cast<std::size_t>(file)], "a remote file has no descriptor");
  std::lock_guard<std::mutex> lock(mutex_);
  int& fd = fds_.at(static_cast<std::size_t>(file));
  if (fd < 0) {
    fd = ::open(info_.files[file].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throwIo(info_.files[file], "cannot open", errno);
  }
  return fd;
}

void ByteSink::appendFrom(int fd, std::uint64_t offset, std::uint64_t n, const std::string& source) {
  scratch_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(n, 4 << 20)));
  while (n > 0) {
    const std::uint64_t chunk = std::min<std::uint64_t>(n, scratch_.size());
    preadAll(fd, scratch_.data(), chunk, offset, source);
    append(scratch_.data(), static_cast<std::size_t>(chunk));
    offset += chunk;
    n -= chunk;
  }
}

TensorStreamer::TensorStreamer(SourceFiles& files, std::size_t bufferBytes, const CancelToken* cancel,
                               ProgressMeter* meter)
    : files_(files), bufferBytes_(std::max<std::size_t>(bufferBytes & ~std::size_t{7}, 64)),
      cancel_(cancel), meter_(meter) {}

std::uint8_t* TensorStreamer::buffer() {
  if (!buffer_) buffer_.reset(new std::uint8_t[bufferBytes_]);  // default-initialised: not zeroed
  return buffer_.get();
}

void TensorStreamer::check() {
  if (cancel_) cancel_->throwIfCancelled("conversion");
}

const std::uint8_t* TensorStreamer::loadedPiece(const TensorPiece& piece) {
  auto it = loaded_.find(&piece);
  if (it == loaded_.end()) {
    HostTensor t = piece.strided ? gatherStrided(piece) : files_.info().pt->load(files_.info().pt->tensors()[piece.ptIndex]);
    it = loaded_.emplace(&piece, std::move(t)).first;
  }
  return it->second.data;
}

// A strided DCP item: its storage record read whole, its elements gathered in row-major order.
HostTensor TensorStreamer::gatherStrided(const TensorPiece& piece) {
  const auto& s = *piece.strided;
  const std::size_t elem = dtypeBits(sourceDtype_) / 8;
  std::vector<std::uint8_t> storage;
  const std::uint8_t* base = nullptr;
  const std::string& path = files_.info().files[piece.file];
  if (s.zstd) {  // the item decompressed whole; inspect found the storage record inside it
    storage = decompressZstdItem(files_.reader(piece.file), s.itemAt, s.itemBytes, s.plainBytes, path);
    if (storage.size() != s.plainBytes || s.storageAt + s.storageBytes > storage.size())
      throw Error(ErrorKind::BadInput, path, "a zstd item changed since it was inspected");
    base = storage.data() + s.storageAt;
  } else {
    storage.resize(static_cast<std::size_t>(s.storageBytes));
    files_.read(piece.file, storage.data(), s.storageBytes, s.storageAt);
    base = storage.data();
  }
  std::uint64_t count = 1;
  for (auto d : piece.shape) count *= static_cast<std::uint64_t>(d);
  auto out = std::make_shared<std::vector<std::uint8_t>>(static_cast<std::size_t>(count * elem));
  stoker::gatherStrided(base, elem, s.elementOffset, piece.shape, s.stride, out->data());
  HostTensor loaded;
  loaded.dtype = sourceDtype_;
  loaded.shape = piece.shape;
  loaded.data = out->data();
  loaded.nbytes = out->size();
  loaded.owner = std::move(out);
  return loaded;
}

void TensorStreamer::readRun(const CopyRun& run, std::uint8_t* dst) {
  if (run.piece->loadsWhole()) {
    std::memcpy(dst, loadedPiece(*run.piece) + run.pieceOffset, run.length);
    return;
  }
  const std::uint64_t windowBytes = std::min<std::uint64_t>(1 << 20, bufferBytes_ / 4);
  if (run.length * 8 > windowBytes) {  // long enough to read directly
    files_.read(run.piece->file, dst, run.length, run.piece->dataOffset + run.pieceOffset);
    return;
  }
  for (auto& w : windows_) {
    if (w.piece == run.piece && run.pieceOffset >= w.begin && run.pieceOffset + run.length <= w.begin + w.size) {
      std::memcpy(dst, w.bytes.get() + (run.pieceOffset - w.begin), run.length);
      return;
    }
  }
  // Refill the least recently filled of a few windows from this run onwards.
  constexpr std::size_t kWindows = 8;
  if (windows_.size() < kWindows) windows_.emplace_back();
  Window& w = windows_[nextWindow_++ % windows_.size()];
  std::uint64_t elements = 1;
  for (auto d : run.piece->shape) elements *= static_cast<std::uint64_t>(d);
  const std::uint64_t pieceBytes = dtypeBytesFor(sourceDtype_, elements).value_or(0);
  w.piece = run.piece;
  w.begin = run.pieceOffset;
  w.size = static_cast<std::size_t>(std::min<std::uint64_t>(windowBytes, pieceBytes - run.pieceOffset));
  if (w.capacity < w.size) {  // zero-filling on every refill cost more than the copy itself
    w.bytes.reset(new std::uint8_t[w.size]);
    w.capacity = w.size;
  }
  files_.read(run.piece->file, w.bytes.get(), w.size, run.piece->dataOffset + w.begin);
  std::memcpy(dst, w.bytes.get(), run.length);
}

void TensorStreamer::flushSmall(ByteSink& sink) {
  if (used_ == 0) return;
  sink.append(buffer_.get(), used_);
  if (meter_) meter_->add(used_, item_);
  used_ = 0;
  check();
}

// `length` bytes to the sink in steps of at most `step` (append(done, n) moves each), reporting
// progress and honouring cancel between steps.
void TensorStreamer::inSteps(std::uint64_t length, std::uint64_t step,
                             const std::function<void(std::uint64_t done, std::uint64_t n)>& append) {
  for (std::uint64_t done = 0; done < length;) {
    const std::uint64_t n = std::min<std::uint64_t>(length - done, step);
    append(done, n);
    done += n;
    if (meter_) meter_->add(n, item_);
    check();
  }
}

// Keep-dtype path: big runs go file to file (a remote file's through memory, from the blocks its
// readahead fetched), small ones are batched.
void TensorStreamer::emit(const CopyRun& run, ByteSink& sink) {
  if (run.piece->loadsWhole()) {
    flushSmall(sink);
    const std::uint8_t* data = loadedPiece(*run.piece) + run.pieceOffset;
    inSteps(run.length, kProgressStep, [&](std::uint64_t done, std::uint64_t n) { sink.append(data + done, static_cast<std::size_t>(n)); });
    return;
  }
  if (run.length >= kKernelCopyMin || run.length > bufferBytes_) {
    flushSmall(sink);
    const int file = run.piece->file;
    const std::uint64_t at = run.piece->dataOffset + run.pieceOffset;
    if (files_.isRemote(file)) {
      remoteChunk_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(run.length, kRemoteChunk)));
      inSteps(run.length, kRemoteChunk, [&](std::uint64_t done, std::uint64_t n) {
        files_.read(file, remoteChunk_.data(), n, at + done);
        sink.append(remoteChunk_.data(), static_cast<std::size_t>(n));
      });
    } else {
      const int fd = files_.fd(file);
      const std::string& source = files_.info().files[static_cast<std::size_t>(file)];
      inSteps(run.length, kProgressStep, [&](std::uint64_t done, std::uint64_t n) { sink.appendFrom(fd, at + done, n, source); });
    }
    return;
  }
  if (used_ + run.length > bufferBytes_) flushSmall(sink);
  readRun(run, buffer() + used_);
  used_ += run.length;
}

void TensorStreamer::flushConvert(const PlannedTensor& t, ByteSink& sink, F16Overflow* overflow) {
  if (used_ == 0) return;
  const std::size_t elem = dtypeBits(t.source->dtype) / 8;
  requireTorchCheckpointOps("a dtype conversion").convertFloats(buffer_.get(), t.source->dtype, t.dtype, used_ / elem,
                                                                converted_, overflow);
  sink.append(converted_.data(), converted_.size());
  if (meter_) meter_->add(converted_.size(), item_);
  used_ = 0;
  check();
}

void TensorStreamer::stream(const PlannedTensor& t, ByteSink& sink, F16Overflow* overflow) {
  item_ = t.name;
  sourceDtype_ = t.source->dtype;
  for (auto& w : windows_) w.piece = nullptr;  // pieces belong to one tensor; keep the buffers
  loaded_.clear();  // left over if the last tensor threw
  check();
  RunCursor cursor(t);
  CopyRun run, pending;
  bool havePending = false;
  const bool convert = t.converts();
  auto take = [&](const CopyRun& r) {
    if (!convert) return emit(r, sink);
    // Split long runs on element boundaries (bufferBytes_ is a multiple of 8).
    for (std::uint64_t done = 0; done < r.length;) {
      if (used_ == bufferBytes_) flushConvert(t, sink, overflow);
      const std::uint64_t n = std::min<std::uint64_t>(r.length - done, bufferBytes_ - used_);
      CopyRun part{r.piece, r.pieceOffset + done, n};
      readRun(part, buffer() + used_);
      used_ += n;
      done += n;
    }
  };
  while (cursor.next(run)) {
    // Coalesce runs that continue each other in the same piece.
    if (havePending && run.piece == pending.piece && pending.pieceOffset + pending.length == run.pieceOffset) {
      pending.length += run.length;
      continue;
    }
    if (havePending) take(pending);
    pending = run;
    havePending = true;
  }
  if (havePending) take(pending);
  if (convert)
    flushConvert(t, sink, overflow);
  else
    flushSmall(sink);
  loaded_.clear();  // the next tensor has pieces of its own
}

}  // namespace stoker
