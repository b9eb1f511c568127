// Fuzz target: NumPy .npy files (every format version, byte order and memory order).
#include "fuzz_target.h"
#include "io/npy_reader.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(npy) {
  const std::string path = stoker::fuzz::writeScratchFile("input.npy", data, size);
  const stoker::HostTensor t = stoker::readNpy(path);
  stoker::fuzz::checkHostTensor(t);
  // Data is either a view of the file (so it fits inside it) or a decoded copy of what it holds.
  check(t.nbytes <= size, "no more data than the file held");
}
