// util/read_file: reading a file, or a range of one, into memory with one open and close and
// errors that name the file -- what every sample read of the image datasets does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

// `out` = the whole of `path`. Error(BadInput) when it is not a regular file or is larger than
// `maxBytes`, Error(Io) with the system's reason when it cannot be opened or read.
void readWholeFile(const std::string& path, std::size_t maxBytes, std::vector<std::uint8_t>& out);

// Reads up to `n` bytes of `path` at `offset` into `dst`; the count read (fewer only where the
// file ends). Error(Io) naming `subject` (default: the path) when it cannot be opened or read.
std::size_t readFileRange(const std::string& path, std::uint64_t offset, void* dst, std::size_t n,
                          const std::string& subject = {});

}  // namespace stoker
