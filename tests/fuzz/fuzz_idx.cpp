// Fuzz target: IDX files of the MNIST family, plain (and gzip-compressed, when the input
// starts with gzip's magic: the reader decides by content).
#include "fuzz_target.h"
#include "io/idx_reader.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(idx) {
  const std::string path = stoker::fuzz::writeScratchFile("input-idx3-ubyte", data, size);
  const stoker::HostTensor t = stoker::readIdx(path);
  const auto bytes = stoker::dtypeBytesFor(t.dtype, t.elementCount());
  check(bytes && *bytes == t.nbytes, "byte count = elements x dtype size");
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  volatile std::uint64_t sink = sum;
  (void)sink;
}
