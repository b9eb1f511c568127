#include "util/error.h"

#include <cstring>
#include <utility>

#include "util/redacted_url.h"

namespace stoker {

Error::Error(ErrorKind kind, const std::string& subject, const std::string& reason)
    : Error(kind, redactedUrl(subject), redactedUrl(reason), Redacted{}) {}

Error::Error(ErrorKind kind, std::string subject, std::string reason, Redacted)
    : std::runtime_error(subject.empty() ? reason : subject + ": " + reason),
      kind_(kind), subject_(std::move(subject)), reason_(std::move(reason)) {}

void throwIo(const std::string& subject, const std::string& what, int errnum) {
  throw Error(ErrorKind::Io, subject, what + ": " + std::strerror(errnum));
}

}  // namespace stoker
