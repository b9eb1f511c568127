// io/zstd_item: a DCP item stored through torch >= 2.6's ZStandard extension
// (`transform_descriptors: ["stream.zstd/1"]`): the item's bytes are zstd frames of what
// torch.save wrote, without a content size (zstandard's stream_writer). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

// Whether Stoker reads items with these transform descriptors: none, or "stream.zstd/1[.x]".
// Otherwise the reason, naming the descriptor.
std::string unsupportedTransforms(const std::vector<std::string>& transforms);
bool isZstd(const std::vector<std::string>& transforms);

// The `length` bytes at `offset` in `fd` decompressed. Error(BadInput) naming `subject` when they
// are not zstd frames, end mid-frame, or decompress to more than `maxBytes` (a bomb's bound).
std::vector<std::uint8_t> decompressZstdItem(int fd, std::uint64_t offset, std::uint64_t length,
                                             std::uint64_t maxBytes, const std::string& subject);

}  // namespace stoker
