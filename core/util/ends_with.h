// util/ends_with: std::string::ends_with before C++20.
#pragma once

#include <string_view>

namespace stoker {

inline bool endsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace stoker
