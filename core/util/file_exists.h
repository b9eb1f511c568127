// util/file_exists: "is there a file here?" for names that come from the files a user opens
// (an HF index's shard names, a ranks folder). std::filesystem::exists(path) throws
// filesystem_error for a name the OS refuses outright (ENAMETOOLONG, found by fuzz_hf_index; or
// EACCES on a parent); here those become one clear Error(BadInput) naming the path instead.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "util/error.h"

namespace stoker {

inline bool fileExists(const std::filesystem::path& path) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (ec) throwBadInput(path.string(), "cannot be looked up: " + ec.message());
  return exists;
}

}  // namespace stoker
