// Fuzz target: IDX files of the MNIST family, plain (and gzip-compressed, when the input
// starts with gzip's magic: the reader decides by content).
#include "fuzz_target.h"
#include "io/idx_reader.h"

STOKER_FUZZ_TARGET(idx) {
  const std::string path = stoker::fuzz::writeScratchFile("input-idx3-ubyte", data, size);
  const stoker::HostTensor t = stoker::readIdx(path);
  stoker::fuzz::checkHostTensor(t);
}
