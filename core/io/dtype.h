// io/dtype: element types Stoker reads and writes, named as safetensors does.
// Torch-free on purpose: parsers and planners only need sizes and names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stoker {

// Declared in the official safetensors order, which is ascending alignment:
// the official writer sorts tensors by *descending* dtype, then by name.
enum class Dtype : std::uint8_t {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

inline constexpr int kDtypeCount = static_cast<int>(Dtype::U64) + 1;

std::string_view dtypeName(Dtype d);
std::optional<Dtype> dtypeFromName(std::string_view name);
// Width of one element in bits (F4 is 4, F6 is 6, BOOL is stored as a byte).
unsigned dtypeBits(Dtype d);
bool dtypeIsFloating(Dtype d);

// Bytes for `elements` values, or nullopt when elements*bits overflows or does
// not end on a byte boundary (sub-byte types).
std::optional<std::uint64_t> dtypeBytesFor(Dtype d, std::uint64_t elements);

// "[2, 3]": how messages and tables show a shape.
std::string shapeText(const std::vector<std::int64_t>& shape);

}  // namespace stoker
