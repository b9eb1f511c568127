// c_api_util: what every file of the C ABI shares -- turning exceptions into the per-thread error
// (stoker_last_error) and strings into caller-freed copies. Nothing crosses the ABI as an exception.
#pragma once

#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stoker_c.h"

namespace stoker::capi {

void setError(int kind, const std::string& message);
void clearError();
// The exception in flight as the per-thread error (stoker::Error keeps its kind; c10::Error and
// std::bad_alloc map to bad input and out of memory).
void setErrorFromCurrentException();
char* copyString(const std::string& text);
// A document as text for Python, invalid UTF-8 (a file name from a hostile folder) replaced, never
// thrown: strict dump() failed describe() -- and so the Loader itself -- on such a name.
std::string jsonText(const nlohmann::json& doc);

// Runs `body`, returning its result, or `failed` with the error set when it throws.
template <typename R, typename F>
R guarded(R failed, F&& body) {
  clearError();
  try {
    return body();
  } catch (...) {
    setErrorFromCurrentException();
    return failed;
  }
}

}  // namespace stoker::capi
