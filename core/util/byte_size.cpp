#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace stoker {

std::uint64_t parseByteSize(const std::string& text, const std::string& what) {
  auto bad = [&] {
    throwBadInput(what, "\"" + text + "\" is not a size (examples: 512MiB, 5GB, 2KB, 1048576)");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) bad();
  double number = 0;
  try {
    std::size_t used = 0;
    number = std::stod(text.substr(0, i), &used);
    if (used != i) bad();
  } catch (const std::exception&) {
    bad();
  }
  std::string unit;
  for (std::size_t k = i; k < text.size(); ++k)
    if (text[k] != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[k])));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gb") scale = 1e9;
  else if (unit == "t" || unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else bad();
  double bytes = std::floor(number * scale);
  if (!(bytes >= 0) || bytes > 9.0e18) bad();
  return static_cast<std::uint64_t>(bytes);
}

std::string formatMiB(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string humanBytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace stoker
