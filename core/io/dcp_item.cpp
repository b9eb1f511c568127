#include "io/dcp_item.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>

#include "util/error.h"

namespace stoker {
namespace {

std::size_t preadSome(int fd, void* dst, std::size_t n, std::uint64_t at) {
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<std::size_t>(r);
  }
  return done;
}

// The item's byte range, as the zip reader's whole world.
class ItemRange : public caffe2::serialize::ReadAdapterInterface {
 public:
  ItemRange(int fd, std::uint64_t offset, std::uint64_t length) : fd_(fd), offset_(offset), length_(length) {}
  size_t size() const override { return length_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= length_) return 0;
    n = static_cast<size_t>(std::min<std::uint64_t>(n, length_ - pos));
    return preadSome(fd_, buf, n, offset_ + pos);
  }

 private:
  int fd_;
  std::uint64_t offset_, length_;
};

}  // namespace

DcpTensorItem readDcpTensorItem(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                const std::string& subject) {
  unsigned char head[16] = {};
  if (preadSome(fd, head, sizeof head, offset) < std::min<std::uint64_t>(sizeof head, length) || length < 22)
    throwBadInput(subject, "item of " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                               " of " + path + " is too short for a torch.save zip");
  if (std::memcmp(head, "PK\x03\x04", 4) != 0) {
    if (head[8] == '{')  // an 8-byte header length then JSON: DCP's opt-in safetensors serialization
      throwBadInput(subject, "items serialised as safetensors (DCP's SerializationFormat.SAFETENSORS) are not "
                             "supported yet; save with the default torch.save serialization");
    throwBadInput(subject, "item at offset " + std::to_string(offset) + " of " + path +
                               " is not a torch.save zip (no zip signature)");
  }
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<ItemRange>(fd, offset, length));
    if (reader.hasRecord("byteorder")) {
      auto [ptr, size] = reader.getRecord("byteorder");
      if (std::string(static_cast<const char*>(ptr.get()), size) != "little")
        throwBadInput(subject, "big-endian items are not supported");
    }
    if (!reader.hasRecord("data.pkl")) throwBadInput(subject, "item in " + path + " has no data.pkl");
    auto [pkl, size] = reader.getRecord("data.pkl");
    PyRef root = unpickle(static_cast<const std::uint8_t*>(pkl.get()), size, subject + " (item in " + path + ")");
    if (root->kind != PyValue::Kind::Tensor) throwBadInput(subject, "item in " + path + " does not hold a tensor");
    DcpTensorItem item;
    item.ref = root->tensor;
    const std::string record = "data/" + item.ref.storageKey;
    if (!reader.hasRecord(record)) throwBadInput(subject, "item in " + path + " has no record " + record);
    const std::uint64_t at = reader.getRecordOffset(record);
    // The local header ending right before the data says whether it is stored (method 0).
    unsigned char local[30];
    const std::string suffix = "/" + record;
    bool stored = false;
    for (std::uint64_t back = 30 + suffix.size(); back <= std::min<std::uint64_t>(at, 30 + 1024 + 512); ++back) {
      if (preadSome(fd, local, 30, offset + at - back) != 30 || std::memcmp(local, "PK\x03\x04", 4) != 0) continue;
      const unsigned nameLen = local[26] | (local[27] << 8), extraLen = local[28] | (local[29] << 8);
      if (30 + nameLen + extraLen != back) continue;
      std::string name(nameLen, '\0');
      preadSome(fd, name.data(), nameLen, offset + at - back + 30);
      if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      stored = (local[8] | (local[9] << 8)) == 0;
      if (!stored) throwBadInput(subject, "item in " + path + " keeps its storage compressed");
      break;
    }
    if (!stored) throwBadInput(subject, "item in " + path + ": cannot find the zip entry of " + record);
    const std::uint64_t storageBytes = static_cast<std::uint64_t>(item.ref.storageNumel) * (dtypeBits(item.ref.dtype) / 8);
    if (at + storageBytes > length)
      throwBadInput(subject, "item in " + path + ": its storage of " + std::to_string(storageBytes) +
                                 " bytes runs past the item's end");
    item.storageAt = offset + at;
    return item;
  } catch (const c10::Error& e) {
    throwBadInput(subject, "item at offset " + std::to_string(offset) + " of " + path + " is a corrupt zip: " +
                               e.what_without_backtrace());
  }
}

}  // namespace stoker
