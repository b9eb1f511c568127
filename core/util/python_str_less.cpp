#include "util/python_str_less.h"

#include <cstdint>

namespace stoker {
namespace {

// The code point at s[i] as Python's UTF-8 decoder with surrogateescape reads it, and its length:
// a sequence Python accepts (no overlong forms, no surrogates, nothing past U+10FFFF), else the
// one byte escaped to U+DC00 + byte (the bytes after it are read again, as Python escapes each
// byte of an invalid run).
std::uint32_t codePointAt(std::string_view s, std::size_t i, std::size_t& length) {
  auto byte = [&](std::size_t k) { return k < s.size() ? static_cast<std::uint8_t>(s[k]) : 0u; };
  auto continuation = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    const unsigned b = byte(k);
    return k < s.size() && b >= lo && b <= hi;
  };
  const unsigned b0 = byte(i);
  length = 1;
  if (b0 < 0x80) return b0;
  if (b0 >= 0xC2 && b0 <= 0xDF && continuation(i + 1)) {
    length = 2;
    return ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (continuation(i + 1, lo, hi) && continuation(i + 2)) {
      length = 3;
      return ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
    }
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (continuation(i + 1, lo, hi) && continuation(i + 2) && continuation(i + 3)) {
      length = 4;
      return ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) | (byte(i + 3) & 0x3Fu);
    }
  }
  return 0xDC00u + b0;
}

}  // namespace

bool pythonStrLess(std::string_view a, std::string_view b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j] && static_cast<std::uint8_t>(a[i]) < 0x80) {  // the common case: equal ASCII
      ++i, ++j;
      continue;
    }
    std::size_t la = 0, lb = 0;
    const std::uint32_t ca = codePointAt(a, i, la), cb = codePointAt(b, j, lb);
    if (ca != cb) return ca < cb;
    i += la;
    j += lb;
  }
  return i == a.size() && j < b.size();
}

}  // namespace stoker
