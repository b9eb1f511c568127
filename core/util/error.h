// util/error: the one exception type the core throws, with a kind the CLI maps
// to its exit status (bad input -> 2) and a message "<subject>: <reason>" without secrets.
#pragma once

#include <stdexcept>
#include <string>

namespace stoker {

enum class ErrorKind {
  BadInput,   // the user's file, option or request is invalid
  Io,         // the system refused: missing file, permission, disk full
  Cancelled,  // a cancel token stopped the work
  Timeout,    // a stage did not finish within the time it was given
  OutOfMemory,  // a device (real or simulated) refused an allocation
  Internal,   // a bug in Stoker
  Network,    // a server could not be reached, or kept failing, within the retry budget
};

// Its subject and reason never hold a URL's password or a presigned signature (redactedUrl hides
// them as the Error is made): every log, dialog, exception in Python and telemetry record that
// shows an Error is safe, however deep in the core it was thrown.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& subject, const std::string& reason);

  ErrorKind kind() const { return kind_; }
  const std::string& subject() const { return subject_; }
  const std::string& reason() const { return reason_; }

 private:
  ErrorKind kind_;
  std::string subject_;
  std::string reason_;

  struct Redacted {};
  Error(ErrorKind kind, std::string subject, std::string reason, Redacted);
};

[[noreturn]] inline void throwBadInput(const std::string& subject, const std::string& reason) {
  throw Error(ErrorKind::BadInput, subject, reason);
}

// Throws ErrorKind::Io with strerror(errnum) appended to `what`.
[[noreturn]] void throwIo(const std::string& subject, const std::string& what, int errnum);

}  // namespace stoker
