#include "io/dcp_item.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/zip_archive.h"
#include "io/zstd_item.h"
#include "util/error.h"
#include "util/pread_full.h"

namespace stoker {

DcpTensorItem readDcpTensorItem(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                const std::string& subject) {
  unsigned char head[16] = {};
  const long long got = preadFull(fd, head, sizeof head, offset);
  const std::string where = "item at offset " + std::to_string(offset) + " of " + path;
  if (length < 22 || got < static_cast<long long>(sizeof head))
    throwBadInput(subject, where + " (" + std::to_string(length) + " bytes) is too short for a torch.save zip");
  if (std::memcmp(head, "PK\x03\x04", 4) != 0) {
    if (head[8] == '{')  // an 8-byte header length then JSON: DCP's opt-in safetensors serialization
      throwBadInput(subject, "items serialised as safetensors (DCP's SerializationFormat.SAFETENSORS) are not "
                             "supported yet; save with the default torch.save serialization");
    throwBadInput(subject, where + " is not a torch.save zip (no zip signature)");
  }
  const ZipArchive zip = ZipArchive::open(fd, offset, length, subject + ": " + where);
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
  const std::vector<std::uint8_t> plain = decompressZstdItem(fd, offset, length, maxPlainBytes, subject);
  // The zip reader reads through a descriptor: an anonymous in-memory file holds the plain item.
  const int memFd = ::memfd_create("stoker-dcp-item", MFD_CLOEXEC);
  if (memFd < 0) throwIo(subject, "cannot create an in-memory file for a decompressed item", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{memFd};
  std::size_t done = 0;
  while (done < plain.size()) {
    const ssize_t w = ::write(memFd, plain.data() + done, plain.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throwIo(subject, "cannot hold a decompressed item in memory", errno);
    done += static_cast<std::size_t>(w);
  }
  DcpTensorItem item = readDcpTensorItem(memFd, path + " (decompressed zstd item at offset " + std::to_string(offset) + ")",
                                         0, plain.size(), subject);
  item.plainBytes = plain.size();
  return item;
}

}  // namespace stoker
