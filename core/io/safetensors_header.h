// io/safetensors_header: parse and validate a safetensors header exactly by
// the official rules (huggingface/safetensors `read_metadata` + `validate`),
// plus the checks the official parser leaves implicit (duplicate names,
// hostile JSON). Torch-free: inspect and the planners use it alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace stoker {

inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the data section
  std::uint64_t end = 0;
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t headerBytes = 0;           // N, the JSON length incl. padding
  std::vector<SafetensorsEntry> tensors;   // sorted by data offset (file order)
  std::map<std::string, std::string> metadata;
  bool hasMetadata = false;
  std::uint64_t dataStart() const { return 8 + headerBytes; }
  std::uint64_t dataBytes() const { return tensors.empty() ? 0 : tensors.back().end; }
};

// Validates the first bytes of a file of `fileSize` bytes. `available` is how
// many bytes from the start `file` points to (the whole file when mapped).
// Throws Error(BadInput) with `subject` and the first rule broken.
SafetensorsHeader parseSafetensorsHeader(const std::uint8_t* file, std::uint64_t available,
                                         std::uint64_t fileSize, const std::string& subject);

// Strict UTF-8 check (no overlongs, no surrogates, nothing past U+10FFFF).
bool isValidUtf8(const std::uint8_t* p, std::size_t n);

}  // namespace stoker
