// Fuzz target: one DCP item -- a torch.save zip, or the same zstd-compressed (torch >= 2.6's
// stream.zstd/1) -- as read.cpp reads each chunk's item: its zip directory, data.pkl through the
// restricted unpickler, the storage record located. Decompression is bounded (16 MiB here).
#include <fcntl.h>
#include <unistd.h>

#include "fuzz_target.h"
#include "io/dcp_item.h"
#include "io/dtype.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(dcp_item) {
  const std::string path = stoker::fuzz::writeScratchFile("__0_0.distcp", data, size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "the scratch file opens");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const bool zstd = size >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd;
  const stoker::DcpTensorItem item =
      zstd ? stoker::readDcpTensorItemZstd(fd, path, 0, size, 16u << 20, "fuzz")
           : stoker::readDcpTensorItem(fd, path, 0, size, "fuzz");
  const std::uint64_t held = zstd ? item.plainBytes : size;
  const std::uint64_t storageBytes =
      static_cast<std::uint64_t>(item.ref.storageNumel) * (stoker::dtypeBits(item.ref.dtype) / 8);
  check(item.storageAt <= held && storageBytes <= held - item.storageAt, "the storage record lies inside the item");
}
