// Fuzz target: byte sizes on the command line (`--memory-budget`, `hf:SIZE`) and the
// formatters that print them back.
#include <string>

#include "ckpt/reshard_plan.h"
#include "fuzz_target.h"
#include "util/byte_size.h"
#include "util/error.h"

using stoker::fuzz::check;

STOKER_FUZZ_TARGET(byte_size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::uint64_t n = stoker::parseByteSize(text, "--memory-budget");
    check(!stoker::humanBytes(n).empty(), "every size can be printed");
    (void)stoker::formatMiB(static_cast<std::int64_t>(n / 2));
    check(stoker::parseByteSize(std::to_string(n), "round trip") == n, "plain bytes parse back");
  } catch (const stoker::Error& e) {
    if (e.kind() != stoker::ErrorKind::BadInput) throw;
  }
  (void)stoker::parseTargetSpec("hf:" + text, "keep");
}
