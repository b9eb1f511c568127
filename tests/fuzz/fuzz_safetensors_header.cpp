// Fuzz target: the safetensors header parser on raw bytes (the first bytes of a file).
#include "fuzz_target.h"
#include "io/safetensors_header.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(safetensors_header) {
  const stoker::SafetensorsHeader h = stoker::parseSafetensorsHeader(data, size, size, "fuzz.safetensors");
  // What an accepted header promises its users: contiguous, sized, ending at the end of the file.
  std::uint64_t next = 0;
  for (const auto& t : h.tensors) {
    check(t.begin == next, "offsets contiguous in file order");
    std::uint64_t elements = 1;
    for (auto d : t.shape) {
      check(d >= 0, "no negative dimension");
      check(d == 0 || elements <= UINT64_MAX / static_cast<std::uint64_t>(d), "element count fits");
      elements *= static_cast<std::uint64_t>(d);
    }
    const auto bytes = stoker::dtypeBytesFor(t.dtype, elements);
    check(bytes && *bytes == t.nbytes(), "byte count = elements x dtype size");
    next = t.end;
  }
  check(h.dataStart() + h.dataBytes() == size, "the last offset is the end of the file");
  check(h.headerBytes <= stoker::kSafetensorsMaxHeaderBytes, "header within the limit");
}
