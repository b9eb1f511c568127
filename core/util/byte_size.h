// util/byte_size: sizes on the command line ("512MiB", "5GB", "2KB", "1048576")
// and in messages.
#pragma once

#include <cstdint>
#include <string>

namespace stoker {

// Decimal (KB, MB, GB, TB) and binary (KiB, MiB, GiB, TiB) units, case-insensitive,
// optional "B"; plain numbers are bytes. Throws Error(BadInput) naming `what`.
std::uint64_t parseByteSize(const std::string& text, const std::string& what);

// "12.5 MiB": sizes in loader notes and device errors.
std::string formatMiB(std::int64_t bytes);
// "1.5 GiB", "512 B": the largest binary unit below the size, one decimal.
std::string humanBytes(std::uint64_t n);

}  // namespace stoker
