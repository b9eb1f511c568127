// io/dcp_item: one tensor item of a DCP `.distcp` file. DCP stores each item
// as a complete torch.save zip, back to back, at the offset and length its
// `.metadata` records; this reads the item's own central directory (never the
// file's, which is not a zip) and tells where the tensor's storage bytes lie.
#pragma once

#include <cstdint>
#include <string>

#include "io/pickle_reader.h"
#include "io/zip_archive.h"

namespace stoker {

struct DcpTensorItem {
  PyTensorRef ref;              // dtype, size, stride and element offset as torch.save kept them
  std::uint64_t storageAt = 0;  // absolute file offset of the storage record's first byte
  // A zstd-compressed item: the size of the item decompressed, in which storageAt then lies.
  std::uint64_t plainBytes = 0;
};

// `fd` is open on `path`; the item is `length` bytes at `offset`. Throws
// Error(BadInput) naming `subject` for an item that is not a torch.save zip,
// holds something other than one tensor, keeps its storage compressed or past
// the item's end.
DcpTensorItem readDcpTensorItem(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                const std::string& subject);
// The same through `read` (a remote file's: io/remote_zip_reader).
DcpTensorItem readDcpTensorItem(const ZipReadAt& read, const std::string& path, std::uint64_t offset,
                                std::uint64_t length, const std::string& subject);

// The same for an item stored zstd-compressed (io/zstd_item): decompressed (at most
// `maxPlainBytes`, else refused as a bomb) keeping only the zip's head and tail in memory;
// storageAt is an offset into the decompressed bytes.
DcpTensorItem readDcpTensorItemZstd(int fd, const std::string& path, std::uint64_t offset, std::uint64_t length,
                                    std::uint64_t maxPlainBytes, const std::string& subject);
DcpTensorItem readDcpTensorItemZstd(const ZipReadAt& read, const std::string& path, std::uint64_t offset,
                                    std::uint64_t length, std::uint64_t maxPlainBytes, const std::string& subject);

}  // namespace stoker
