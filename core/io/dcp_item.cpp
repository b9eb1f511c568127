#include "io/dcp_item.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "io/zip_archive.h"
#include "io/zstd_item.h"
#include "util/error.h"

namespace stoker {

DcpTensorItem readDcpTensorItem(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                const std::string& subject) {
  return readDcpTensorItem(zipFileReader(fd, path), path, offset, length, subject);
}

DcpTensorItem readDcpTensorItem(const ZipReadAt& read, const std::string& path, std::uint64_t offset,
                                std::uint64_t length, const std::string& subject) {
  unsigned char head[16] = {};
  std::uint64_t got = 0;
  while (got < sizeof head) {
    const std::uint64_t n = read(head + got, sizeof head - got, offset + got);
    if (n == 0) break;
    got += n;
  }
  const std::string where = "item at offset " + std::to_string(offset) + " of " + path;
  if (length < 22 || got < sizeof head)
    throwBadInput(subject, where + " (" + std::to_string(length) + " bytes) is too short for a torch.save zip");
  if (std::memcmp(head, "PK\x03\x04", 4) != 0) {
    if (head[8] == '{')  // an 8-byte header length then JSON: DCP's opt-in safetensors serialization
      throwBadInput(subject, "items serialised as safetensors (DCP's SerializationFormat.SAFETENSORS) are not "
                             "supported yet; save with the default torch.save serialization");
    throwBadInput(subject, where + " is not a torch.save zip (no zip signature)");
  }
  const ZipArchive zip = ZipArchive::open(read, offset, length, subject + ": " + where);
  if (const auto* order = zip.find("byteorder")) {
    if (order->size > 16) throwBadInput(subject, where + ": its byteorder record holds " + std::to_string(order->size) + " bytes");
    const auto bytes = zip.read(*order);
    if (std::string(bytes.begin(), bytes.end()) != "little") throwBadInput(subject, "big-endian items are not supported");
  }
  const auto* pkl = zip.find("data.pkl");
  if (!pkl) throwBadInput(subject, where + " has no data.pkl");
  if (pkl->size > (64u << 20)) throwBadInput(subject, where + ": its data.pkl is larger than 64 MiB");
  const auto bytes = zip.read(*pkl);
  PyRef root = unpickle(bytes.data(), bytes.size(), subject + " (" + where + ")");
  if (root->kind != PyValue::Kind::Tensor) throwBadInput(subject, where + " does not hold a tensor");
  DcpTensorItem item;
  item.ref = root->tensor;
  const std::string record = "data/" + item.ref.storageKey;
  const auto* storage = zip.find(record);
  if (!storage) throwBadInput(subject, where + " has no record " + record);
  if (!storage->stored) throwBadInput(subject, where + " keeps its storage compressed");
  const std::uint64_t storageBytes = static_cast<std::uint64_t>(item.ref.storageNumel) * (dtypeBits(item.ref.dtype) / 8);
  if (storage->size != storageBytes)
    throwBadInput(subject, where + ": record " + record + " holds " + std::to_string(storage->size) +
                               " bytes, its tensor's storage " + std::to_string(storageBytes));
  item.storageAt = storage->dataOffset;
  return item;
}

DcpTensorItem readDcpTensorItemZstd(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                    std::uint64_t maxPlainBytes, const std::string& subject) {
  return readDcpTensorItemZstd(zipFileReader(fd, path), path, offset, length, maxPlainBytes, subject);
}

DcpTensorItem readDcpTensorItemZstd(const ZipReadAt& read, const std::string& path, std::uint64_t offset,
                                    std::uint64_t length, std::uint64_t maxPlainBytes, const std::string& subject) {
  // Only the zip's head (data.pkl, byteorder and the storage record's local header come first in
  // a torch.save zip; data.pkl is at most 64 MiB) and its tail (version, serialization id, the
  // central directory) are kept, in a sparse in-memory file the zip reader reads like any other;
  // the storage bytes between are decompressed and dropped. Inspecting a large or hostile item
  // holds at most 66 MiB, whatever its frames decompress to.
  constexpr std::uint64_t kHead = 65ull << 20;
  constexpr std::uint64_t kTail = 1ull << 20;
  const int memFd = ::memfd_create("stoker-dcp-item", MFD_CLOEXEC);
  if (memFd < 0) throwIo(subject, "cannot create an in-memory file for a decompressed item", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{memFd};
  auto put = [&](const std::uint8_t* p, std::size_t n, std::uint64_t at) {
    while (n > 0) {
      const ssize_t w = ::pwrite(memFd, p, n, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throwIo(subject, "cannot hold a decompressed item in memory", errno);
      p += w, n -= static_cast<std::size_t>(w), at += static_cast<std::uint64_t>(w);
    }
  };
  std::deque<std::vector<std::uint8_t>> tail;  // the last pieces, at least kTail bytes of them
  std::uint64_t tailBytes = 0, at = 0;
  const std::uint64_t plain = decompressZstdItem(read, offset, length, maxPlainBytes, subject,
                                                 [&](const std::uint8_t* p, std::size_t n) {
    if (at < kHead) put(p, static_cast<std::size_t>(std::min<std::uint64_t>(n, kHead - at)), at);
    at += n;
    tail.emplace_back(p, p + n);
    tailBytes += n;
    while (tailBytes - tail.front().size() >= kTail) tailBytes -= tail.front().size(), tail.pop_front();
  });
  if (::ftruncate(memFd, static_cast<off_t>(plain)) != 0) throwIo(subject, "cannot size an in-memory file", errno);
  std::uint64_t tailAt = plain - tailBytes;
  for (const auto& piece : tail) {
    if (tailAt + piece.size() > kHead) put(piece.data(), piece.size(), tailAt);  // the head has the rest
    tailAt += piece.size();
  }
  DcpTensorItem item = readDcpTensorItem(memFd, path + " (decompressed zstd item at offset " + std::to_string(offset) + ")",
                                         0, plain, subject);
  item.plainBytes = plain;
  return item;
}

}  // namespace stoker
