// io/zstd_item: a DCP item stored through torch >= 2.6's ZStandard extension
// (`transform_descriptors: ["stream.zstd/1"]`): the item's bytes are zstd frames of what
// torch.save wrote, without a content size (zstandard's stream_writer). Torch-free.
//
// Decompression streams through a 1 MiB window: callers choose what to keep (a count, a file,
// the head and tail of a zip), so memory follows what they keep, not what a frame claims.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/zip_archive.h"

namespace stoker {

// Whether Stoker reads items with these transform descriptors: none, or "stream.zstd/1[.x]".
// Otherwise the reason, naming the descriptor.
std::string unsupportedTransforms(const std::vector<std::string>& transforms);
bool isZstd(const std::vector<std::string>& transforms);

// Receives the decompressed bytes in order, at most 1 MiB per call.
using ZstdSink = std::function<void(const std::uint8_t* data, std::size_t n)>;

// Decompresses the `length` bytes at `offset` in `fd` into `sink`; returns how many bytes came
// out. Error(BadInput) naming `subject` when they are not zstd frames, end mid-frame, or
// decompress to more than `maxBytes` (a bomb's bound: checked before `sink` sees the excess).
std::uint64_t decompressZstdItem(int fd, std::uint64_t offset, std::uint64_t length, std::uint64_t maxBytes,
                                 const std::string& subject, const ZstdSink& sink);
// The same through `read` (a remote file's, or a conversion's SourceFiles).
std::uint64_t decompressZstdItem(const ZipReadAt& read, std::uint64_t offset, std::uint64_t length,
                                 std::uint64_t maxBytes, const std::string& subject, const ZstdSink& sink);

// The same into memory, for callers that need the whole item and have budgeted `maxBytes` for it
// (reserved up front: no doubling, no copy).
std::vector<std::uint8_t> decompressZstdItem(const ZipReadAt& read, std::uint64_t offset, std::uint64_t length,
                                             std::uint64_t maxBytes, const std::string& subject);

}  // namespace stoker
