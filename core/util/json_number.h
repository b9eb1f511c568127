// util/json_number: integers read from JSON without undefined behaviour. nlohmann's get<T>()
// casts whatever number it holds: a float such as 1e30 into an int64_t is undefined behaviour,
// and a wide integer into an int silently wraps (found by fuzz_telemetry). Core-internal: it
// includes nlohmann/json, which only the core's sources see.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace stoker {

// The integer `v` holds, if it is one (or an integral float) and fits T; nullopt otherwise.
template <class T>
std::optional<T> jsonInteger(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T>);
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(Limits::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= 0 ? static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(Limits::max())
               : Limits::is_signed && i >= static_cast<std::int64_t>(Limits::min()))
      return static_cast<T>(i);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^digits is exact in a double; every integral double below it (and >= min) fits T.
    const double top = std::ldexp(1.0, Limits::digits);
    if (std::isfinite(d) && d == std::trunc(d) && d < top && d >= static_cast<double>(Limits::min()))
      return static_cast<T>(d);
  }
  return std::nullopt;
}

}  // namespace stoker
