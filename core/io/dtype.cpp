#include "io/dtype.h"

#include <array>

namespace stoker {
namespace {

struct DtypeInfo {
  std::string_view name;
  unsigned bits;
  bool floating;
};

constexpr std::array<DtypeInfo, kDtypeCount> kInfo = {{
    {"BOOL", 8, false},    {"F4", 4, true},      {"F6_E2M3", 6, true}, {"F6_E3M2", 6, true},
    {"U8", 8, false},      {"I8", 8, false},     {"F8_E5M2", 8, true}, {"F8_E4M3", 8, true},
    {"F8_E8M0", 8, true},  {"I16", 16, false},   {"U16", 16, false},   {"F16", 16, true},
    {"BF16", 16, true},    {"I32", 32, false},   {"U32", 32, false},   {"F32", 32, true},
    {"C64", 64, false},    {"F64", 64, true},    {"I64", 64, false},   {"U64", 64, false},
}};

const DtypeInfo& info(Dtype d) { return kInfo[static_cast<std::size_t>(d)]; }

}  // namespace

std::string_view dtypeName(Dtype d) { return info(d).name; }

std::optional<Dtype> dtypeFromName(std::string_view name) {
  for (int i = 0; i < kDtypeCount; ++i)
    if (kInfo[static_cast<std::size_t>(i)].name == name) return static_cast<Dtype>(i);
  return std::nullopt;
}

unsigned dtypeBits(Dtype d) { return info(d).bits; }
bool dtypeIsFloating(Dtype d) { return info(d).floating; }

std::optional<std::uint64_t> dtypeBytesFor(Dtype d, std::uint64_t elements) {
  const unsigned width = dtypeBits(d);
  if (width % 8 == 0) {  // whole bytes: only the byte count has to fit, not the bit count
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(width / 8), &bytes)) return std::nullopt;
    return bytes;
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(width), &bits))
    return std::nullopt;
  if (bits % 8 != 0) return std::nullopt;
  return bits / 8;
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace stoker
