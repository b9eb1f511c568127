// Fuzz target: NumPy .npy files (every format version, byte order and memory order).
#include "fuzz_target.h"
#include "io/npy_reader.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(npy) {
  const std::string path = stoker::fuzz::writeScratchFile("input.npy", data, size);
  const stoker::HostTensor t = stoker::readNpy(path);
  const auto bytes = stoker::dtypeBytesFor(t.dtype, t.elementCount());
  check(bytes && *bytes == t.nbytes, "byte count = elements x dtype size");
  // Data is either a view of the file (so it fits inside it) or a decoded copy of what it holds.
  check(t.nbytes <= size, "no more data than the file held");
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  volatile std::uint64_t sink = sum;
  (void)sink;
}
