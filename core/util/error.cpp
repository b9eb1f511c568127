#include "util/error.h"

#include <cstring>

namespace stoker {

void throwIo(const std::string& subject, const std::string& what, int errnum) {
  throw Error(ErrorKind::Io, subject, what + ": " + std::strerror(errnum));
}

}  // namespace stoker
