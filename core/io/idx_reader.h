// io/idx_reader: the IDX format of the MNIST family (Fashion-MNIST included),
// gzip-compressed or plain. Big-endian on disk, decoded to native order.
#pragma once

#include <string>

#include "io/host_tensor.h"

namespace stoker {

// Throws Error(BadInput) naming the file for a bad magic, unknown type code,
// or data shorter/longer than the header's dimensions declare.
HostTensor readIdx(const std::string& path);

}  // namespace stoker
