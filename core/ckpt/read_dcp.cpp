// ckpt/read_dcp: a PyTorch Distributed Checkpoint directory as logical tensors
// and pieces. Each chunk of a tensor (FSDP's dim-0 shards, 2-D boxes of FSDP +
// tensor parallel, a replicated tensor's one chunk) becomes one piece located
// inside its item's storage record, so every target of the engine reads DCP.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "ckpt/layout_readers.h"
#include "io/dcp_item.h"
#include "io/dcp_metadata.h"
#include "io/strided_gather.h"
#include "io/remote_zip_reader.h"
#include "io/zstd_item.h"
#include "net/remote_object.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/pread_full.h"
#include "util/read_only_fd.h"
#include "util/run_jobs.h"

namespace stoker {
namespace fs = std::filesystem;
namespace {

std::vector<std::uint8_t> readWhole(const std::string& path) {
  ReadOnlyFd fd(path);
  if (fd.get() < 0) throwIo(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throwIo(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) throwBadInput(path, "is not a regular file");
  if (st.st_size > (256ll << 20)) throwBadInput(path, "is larger than 256 MiB; not a DCP .metadata");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  const long long done = preadFull(fd.get(), bytes.data(), bytes.size(), 0);
  if (done < 0) throwIo(path, "read failed", errno);
  bytes.resize(static_cast<std::size_t>(done));
  return bytes;
}

// A DCP folder in S3 or behind HTTP(S) (a URL ending in '/'): .metadata fetched whole; each data
// file opened once (16 at a time), with the first and last 4 KiB of each tensor item fetched ahead
// -- a torch.save zip keeps data.pkl and its storage record's local header at its start, the
// central directory at its end -- neighbours joined, so an item's zip is read from memory and
// never costs a round trip of its own. A zstd item is read whole by range requests (it must be
// decompressed to be listed, as a local one is).
class RemoteDcpFiles {
 public:
  explicit RemoteDcpFiles(std::string folder)
      : folder_(std::move(folder)), http_(RemoteUrl::parse(folder_).scheme != RemoteUrl::Scheme::S3) {}
  std::string url(const std::string& rel) const { return folder_ + (http_ ? percentEncode(rel, true) : rel); }

  std::vector<std::uint8_t> metadata() const {
    const std::string bytes = RemoteObject::open(url(".metadata"), 1 << 20)->whole(256ull << 20, "a DCP .metadata");
    return {bytes.begin(), bytes.end()};
  }

  // Opens every file that `items` (relative path -> its tensor items' (offset, length)) name and
  // fetches the items' ends. A file the server does not have is left out (the caller names it).
  void open(const std::map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>>& items) {
    constexpr std::uint64_t kItemEnd = 4 << 10;
    std::vector<const std::string*> names;
    for (const auto& [rel, list] : items) names.push_back(&rel);
    std::vector<std::shared_ptr<RemoteSpans>> opened(names.size());
    forEachInParallel(static_cast<std::int64_t>(names.size()), 16, [&](std::int64_t i) {
      const std::string& rel = *names[static_cast<std::size_t>(i)];
      std::shared_ptr<const RemoteObject> object;
      try {
        object = RemoteObject::open(url(rel), kItemEnd);
      } catch (const Error& e) {
        if (isNotFound(e)) return;
        throw;
      }
      auto spans = std::make_shared<RemoteSpans>(object);
      spans->add(0, ByteVector(object->head().begin(), object->head().end()));
      std::vector<std::pair<std::uint64_t, std::uint64_t>> ends;
      for (const auto& [offset, length] : items.at(rel)) {
        ends.emplace_back(offset, std::min(length, kItemEnd));
        ends.emplace_back(offset + length - std::min(length, kItemEnd), std::min(length, kItemEnd));
      }
      spans->fetch(std::move(ends), 64 << 10, names.size() > 1 ? 1 : 16);
      opened[static_cast<std::size_t>(i)] = std::move(spans);
    });
    for (std::size_t i = 0; i < names.size(); ++i)
      if (opened[i]) files_.emplace(*names[i], std::move(opened[i]));
  }
  // The file's spans, or null when the server does not have it.
  std::shared_ptr<RemoteSpans> file(const std::string& rel) const {
    const auto it = files_.find(rel);
    return it == files_.end() ? nullptr : it->second;
  }

 private:
  std::string folder_;
  bool http_;
  std::map<std::string, std::shared_ptr<RemoteSpans>> files_;
};

// A relative_path must name a file in the checkpoint directory itself.
bool staysInDirectory(const std::string& rel) {
  if (rel.empty() || rel.front() == '/') return false;
  for (const auto& part : fs::path(rel))
    if (part == ".." || part == ".") return false;
  return true;
}

// A non-tensor item is decompressed (and counted, not kept) to learn its size: step counters, RNG
// states and configs are small.
constexpr std::uint64_t kMaxPlainItemBytes = 256ull << 20;
constexpr std::uint64_t kZstdItemSlack = 1ull << 20;

std::uint64_t volume(const std::vector<std::int64_t>& sizes) {
  std::uint64_t v = 1;
  for (auto s : sizes) v *= static_cast<std::uint64_t>(s);  // sizes are checked against the tensor's first
  return v;
}

std::string boxText(const std::vector<std::int64_t>& offsets, const std::vector<std::int64_t>& sizes) {
  return "offsets " + shapeText(offsets) + " sizes " + shapeText(sizes);
}

// The chunks must tile the tensor: each inside it, none overlapping, volumes summing to it.
void checkTiling(const LogicalTensor& t, const std::vector<DcpChunk>& chunks, std::vector<std::string>& problems) {
  std::uint64_t volume = 0;
  for (const auto& c : chunks) {
    std::uint64_t v = 1;
    for (auto s : c.sizes) v *= static_cast<std::uint64_t>(s);
    volume += v;
  }
  std::uint64_t whole = 1;
  for (auto s : t.shape) whole *= static_cast<std::uint64_t>(s);
  // Sorting by the first offset lets the overlap search stop early for FSDP's dim-0 shards.
  std::vector<const DcpChunk*> order;
  for (const auto& c : chunks) order.push_back(&c);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offsets < b->offsets; });
  for (std::size_t i = 0; i < order.size(); ++i) {
    for (std::size_t j = i + 1; j < order.size(); ++j) {
      const DcpChunk& a = *order[i];
      const DcpChunk& b = *order[j];
      if (!a.offsets.empty() && b.offsets[0] >= a.offsets[0] + a.sizes[0]) break;
      bool overlap = true;
      for (std::size_t d = 0; d < a.offsets.size(); ++d)
        overlap = overlap && a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d];
      if (overlap && whole > 0) {
        problems.push_back(t.name + ": chunks " + boxText(a.offsets, a.sizes) + " and " + boxText(b.offsets, b.sizes) +
                           " overlap");
        return;
      }
    }
  }
  if (volume != whole)
    problems.push_back(t.name + ": its chunks hold " + std::to_string(volume) + " elements of its " +
                       std::to_string(whole) + " (holes in the tensor)");
}

}  // namespace

void readDcpDirectory(const std::string& dirIn, CheckpointInfo& info) {
  const std::string dir = dirIn.empty() ? "." : dirIn;
  info.format = CheckpointFormat::Dcp;
  const bool remote = isRemotePath(dir);
  std::optional<RemoteDcpFiles> remoteFiles;
  if (remote) remoteFiles.emplace(dir.back() == '/' ? dir : dir + "/");
  const std::string metaPath = remote ? remoteFiles->url(".metadata") : (fs::path(dir) / ".metadata").string();
  const std::vector<std::uint8_t> bytes = remote ? remoteFiles->metadata() : readWhole(metaPath);
  const DcpMetadata md = parseDcpMetadata(bytes.data(), bytes.size(), metaPath);
  if (remote) {  // every data file opened at once, and its items' zips fetched ahead
    std::map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>> items;
    for (const DcpEntry& e : md.entries) {
      if (!e.isTensor && e.bytes && staysInDirectory(e.bytes->relativePath)) items[e.bytes->relativePath];
      for (const DcpChunk& c : e.chunks)
        if (c.storage && staysInDirectory(c.storage->relativePath))
          items[c.storage->relativePath].emplace_back(c.storage->offset, c.storage->length);
    }
    remoteFiles->open(items);
  }
  info.metadata["dcp_modules"] = md.torch2Modules ? "torch.distributed.checkpoint (torch >= 2.0)"
                                                  : "torch.distributed._shard.checkpoint (torch 1.13)";
  if (md.version) info.metadata["dcp_version"] = *md.version;

  // Each data file once: its index and size. No fd is kept: torch 1.13 writes a file per item, and
  // thousands of open files would run into the descriptor limit.
  struct DataFile {
    int index = -1;
    std::uint64_t size = 0;
  };
  std::map<std::string, DataFile> files;
  auto dataFile = [&](const DcpStorage& s, const std::string& what) -> DataFile& {
    if (!staysInDirectory(s.relativePath))
      throwBadInput(metaPath, what + ": relative_path \"" + s.relativePath + "\" leaves the checkpoint directory");
    auto it = files.find(s.relativePath);
    if (it == files.end() && remote) {
      const std::string url = remoteFiles->url(s.relativePath);
      const auto spans = remoteFiles->file(s.relativePath);
      if (!spans) throwBadInput(metaPath, what + ": its data file " + url + " is missing (HTTP 404 / NoSuchKey)");
      DataFile f;
      f.size = spans->object()->size();
      f.index = addFile(info, url, spans->object());
      it = files.emplace(s.relativePath, f).first;
    } else if (it == files.end()) {
      const std::string path = (fs::path(dir) / s.relativePath).string();
      DataFile f;
      ReadOnlyFd fd(path);
      if (fd.get() < 0) throwBadInput(metaPath, what + ": its data file " + path + " is missing or unreadable");
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) throwBadInput(path, "is not a regular file");
      f.size = static_cast<std::uint64_t>(st.st_size);
      f.index = addFile(info, path);
      it = files.emplace(s.relativePath, f).first;
    }
    if (s.offset > it->second.size || s.length > it->second.size - s.offset)
      throwBadInput(metaPath, what + ": its item (" + std::to_string(s.length) + " bytes at offset " +
                                  std::to_string(s.offset) + ") runs past the end of " + s.relativePath + " (" +
                                  std::to_string(it->second.size) + " bytes)");
    const std::string unsupported = unsupportedTransforms(s.transforms);
    if (!unsupported.empty()) throwBadInput(metaPath, what + ": " + unsupported);
    return it->second;
  };

  // What reads an item of data file `index`: its spans fetched ahead when remote, else a descriptor
  // opened into `fd` (none is kept between items: torch 1.13 writes a file per item).
  auto itemReader = [&](const DcpStorage& s, int index, std::optional<ReadOnlyFd>& fd) -> ZipReadAt {
    if (remote) return remoteFiles->file(s.relativePath)->reader();
    const std::string& path = info.files[static_cast<std::size_t>(index)];
    fd.emplace(path);
    if (fd->get() < 0) throwIo(path, "cannot open", errno);
    return zipFileReader(fd->get(), path);
  };

  std::set<std::pair<int, std::uint64_t>> zstdItems;  // (file, offset) of compressed chunk items
  for (const DcpEntry& e : md.entries) {
    if (!e.isTensor) {
      if (!e.bytes) throwBadInput(metaPath, "\"" + e.fqn + "\": no storage_data entry for this non-tensor item");
      const DataFile& f = dataFile(*e.bytes, "\"" + e.fqn + "\"");
      CheckpointInfo::Item item{e.fqn, e.bytes->length, f.index, e.bytes->offset};
      if (isZstd(e.bytes->transforms)) {  // its plain size is what a DCP target writes
        // As for chunks: one compressed item, one entry (a memoised storage info shared by a
        // million entries decompressed one 256 MiB bomb a million times).
        if (!zstdItems.insert({f.index, e.bytes->offset}).second)
          throwBadInput(metaPath, "\"" + e.fqn + "\": its compressed item (offset " + std::to_string(e.bytes->offset) +
                                      " of " + e.bytes->relativePath + ") is another entry's too");
        std::optional<ReadOnlyFd> fd;
        item.zstd = true;
        item.storedBytes = e.bytes->length;
        item.bytes = decompressZstdItem(itemReader(*e.bytes, f.index, fd), e.bytes->offset, e.bytes->length,
                                        kMaxPlainItemBytes, metaPath + ": \"" + e.fqn + "\"",
                                        [](const std::uint8_t*, std::size_t) {});
      }
      info.nonTensorItems.push_back(item);
      continue;
    }
    if (!e.dtype)
      throwBadInput(metaPath, "\"" + e.fqn + "\": dtype " + e.torchDtype + " is not supported");
    // The overlap check compares chunks pairwise where they share rows: bounded, whatever the metadata.
    if (e.chunks.size() > 65536)
      throwBadInput(metaPath, "\"" + e.fqn + "\" has " + std::to_string(e.chunks.size()) + " chunks (at most 65,536 are read)");
    std::uint64_t numel = 1;
    for (auto s : e.size) {
      if (s < 0) throwBadInput(metaPath, "\"" + e.fqn + "\": negative size " + shapeText(e.size));
      if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(s), &numel))
        throwBadInput(metaPath, "\"" + e.fqn + "\": size " + shapeText(e.size) + " overflows");
    }
    const auto nbytes = dtypeBytesFor(*e.dtype, numel);
    if (!nbytes) throwBadInput(metaPath, "\"" + e.fqn + "\": size " + shapeText(e.size) + " overflows");
    LogicalTensor t = logicalTensor(e.fqn, *e.dtype, e.size, *nbytes);
    bool ok = true;
    for (const DcpChunk& c : e.chunks) {
      const std::string what = "\"" + e.fqn + "\" chunk at " + shapeText(c.offsets);
      if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size())
        throwBadInput(metaPath, what + ": has " + std::to_string(c.offsets.size()) + " dims, the tensor " +
                                    std::to_string(e.size.size()));
      for (std::size_t d = 0; d < e.size.size(); ++d) {
        if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] > e.size[d] || c.sizes[d] > e.size[d] - c.offsets[d]) {
          info.problems.push_back(e.fqn + ": chunk " + boxText(c.offsets, c.sizes) + " exceeds the tensor's size " +
                                  shapeText(e.size));
          ok = false;
        }
      }
      if (!ok) break;
      if (!c.storage) throwBadInput(metaPath, what + ": no storage_data entry for this chunk");
      const DataFile& f = dataFile(*c.storage, what);
      std::optional<ReadOnlyFd> fd;
      const ZipReadAt read = itemReader(*c.storage, f.index, fd);
      const std::uint64_t chunkBytes = dtypeBytesFor(*e.dtype, volume(c.sizes)).value_or(UINT64_MAX);
      const bool zstd = isZstd(c.storage->transforms);
      // Every compressed item is decompressed on its own: chunks sharing one would multiply the work
      // (DCP writes an item per chunk).
      if (zstd && !zstdItems.insert({f.index, c.storage->offset}).second)
        throwBadInput(metaPath, what + ": its compressed item (offset " + std::to_string(c.storage->offset) + " of " +
                                    c.storage->relativePath + ") is another chunk's too");
      // A compressed item holds its chunk's bytes and torch.save's few small records (DCP's writer
      // clones views, so no larger storage): anything past 1 MiB more is a bomb.
      const DcpTensorItem item =
          zstd ? readDcpTensorItemZstd(read, info.files[f.index], c.storage->offset, c.storage->length,
                                       std::min<std::uint64_t>(chunkBytes, UINT64_MAX - kZstdItemSlack) + kZstdItemSlack,
                                       metaPath + ": " + what)
               : readDcpTensorItem(read, info.files[f.index], c.storage->offset, c.storage->length, metaPath + ": " + what);
      if (item.ref.dtype != *e.dtype || item.ref.size != c.sizes) {
        info.problems.push_back(e.fqn + ": the item at " + shapeText(c.offsets) + " holds " +
                                std::string(dtypeName(item.ref.dtype)) + " " + shapeText(item.ref.size) +
                                ", the metadata says " + std::string(dtypeName(*e.dtype)) + " " + shapeText(c.sizes));
        ok = false;
        break;
      }
      TensorPiece p;
      p.file = f.index;
      p.start = c.offsets;
      p.shape = c.sizes;
      const std::uint64_t elem = dtypeBits(*e.dtype) / 8;
      if (isRowMajor(item.ref.size, item.ref.stride) && !zstd) {
        p.dataOffset = item.storageAt + static_cast<std::uint64_t>(item.ref.offset) * elem;
      } else {
        auto s = std::make_shared<TensorPiece::Strided>();
        s->storageAt = item.storageAt;
        s->storageBytes = static_cast<std::uint64_t>(item.ref.storageNumel) * elem;
        s->elementOffset = item.ref.offset;
        s->stride = item.ref.stride;
        if (zstd) {
          s->zstd = true;
          s->itemAt = c.storage->offset;
          s->itemBytes = c.storage->length;
          s->plainBytes = item.plainBytes;
        }
        p.strided = std::move(s);
      }
      t.pieces.push_back(std::move(p));
    }
    if (ok) {
      const std::size_t before = info.problems.size();
      checkTiling(t, e.chunks, info.problems);
      ok = info.problems.size() == before;
    }
    if (!ok) t.pieces.clear();
    info.tensors.push_back(std::move(t));
  }
  std::sort(info.tensors.begin(), info.tensors.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) { return a.name < b.name; });
}

}  // namespace stoker
