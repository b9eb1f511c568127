#include "io/npy_reader.h"

#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "io/byte_order.h"
#include "net/remote_object.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace stoker {
namespace {

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// This reads exactly that grammar: string keys, and values that are strings,
// True/False, or tuples of non-negative integers.
struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<std::int64_t> shape;
};

class DictLiteralParser {
 public:
  DictLiteralParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool haveDescr = false, haveOrder = false, haveShape = false;
    expect('{');
    while (true) {
      skipSpace();
      if (peek() == '}') break;
      std::string key = parseString();
      expect(':');
      skipSpace();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("structured or record dtypes are not supported");
        h.descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order") {
        h.fortranOrder = parseBool();
        haveOrder = true;
      } else if (key == "shape") {
        h.shape = parseTuple();
        haveShape = true;
      } else {
        fail("unexpected header key '" + key + "'");
      }
      skipSpace();
      if (peek() == ',') ++pos_;
    }
    if (!haveDescr || !haveOrder || !haveShape)
      fail("header lacks one of 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) { throwBadInput(path_, ".npy header: " + why); }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skipSpace();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parseString() {
    skipSpace();
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    auto close = s_.find(q, pos_ + 1);
    if (close == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return out;
  }
  bool parseBool() {
    if (s_.substr(pos_, 4) == "True") { pos_ += 4; return true; }
    if (s_.substr(pos_, 5) == "False") { pos_ += 5; return false; }
    fail("fortran_order is not True or False");
  }
  std::vector<std::int64_t> parseTuple() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (true) {
      skipSpace();
      if (peek() == ')') { ++pos_; break; }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("shape holds a non-integer");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v))
          fail("shape dimension overflows");
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      dims.push_back(v);
      skipSpace();
      // "(3 4)" is no tuple numpy writes or reads: a dimension ends at ',' or ')'.
      if (peek() == ',') ++pos_;
      else if (peek() != ')') fail("shape's dimensions are not separated by ','");
    }
    return dims;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  const std::string& path_;
};

struct DescrInfo {
  Dtype dtype;
  bool bigEndian;
  std::size_t swapWidth;  // bytes reversed per unit (complex: per component)
};

DescrInfo decodeDescr(const std::string& d, const std::string& path) {
  if (d.size() < 3) throwBadInput(path, "unsupported .npy dtype '" + d + "'");
  char order = d[0];
  std::string code = d.substr(1);
  static const std::map<std::string, Dtype> kCodes = {
      {"b1", Dtype::BOOL}, {"u1", Dtype::U8},  {"i1", Dtype::I8},  {"i2", Dtype::I16},
      {"u2", Dtype::U16},  {"i4", Dtype::I32}, {"u4", Dtype::U32}, {"i8", Dtype::I64},
      {"u8", Dtype::U64},  {"f2", Dtype::F16}, {"f4", Dtype::F32}, {"f8", Dtype::F64},
      {"c8", Dtype::C64},
  };
  auto it = kCodes.find(code);
  if (it == kCodes.end() || (order != '<' && order != '>' && order != '|' && order != '='))
    throwBadInput(path, "unsupported .npy dtype '" + d + "'");
  std::size_t width = dtypeBits(it->second) / 8;
  if (it->second == Dtype::C64) width = 4;
  return {it->second, order == '>', width};
}

// Copies a column-major array into row-major order, element by element.
void fortranToC(const std::uint8_t* src, std::uint8_t* dst, const std::vector<std::int64_t>& shape,
                std::size_t elem) {
  const std::size_t nd = shape.size();
  std::uint64_t total = 1;
  for (auto d : shape) total *= static_cast<std::uint64_t>(d);
  if (total == 0) return;
  std::vector<std::uint64_t> fstride(nd, 1);  // Fortran strides in elements
  for (std::size_t k = 1; k < nd; ++k) fstride[k] = fstride[k - 1] * static_cast<std::uint64_t>(shape[k - 1]);
  std::vector<std::int64_t> idx(nd, 0);
  std::uint64_t srcIndex = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    std::memcpy(dst + i * elem, src + srcIndex * elem, elem);
    for (std::size_t k = nd; k-- > 0;) {  // odometer over C order
      if (++idx[k] < shape[k]) {
        srcIndex += fstride[k];
        break;
      }
      srcIndex -= fstride[k] * static_cast<std::uint64_t>(shape[k] - 1);
      idx[k] = 0;
    }
  }
}

}  // namespace

HostTensor readNpy(const std::string& path, const PartOptions* parts) {
  auto map = mapOrFetch(path, parts ? *parts : PartOptions{});  // a URL: fetched whole
  const std::uint8_t* p = map->data();
  const std::uint64_t size = map->size();
  static const std::uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(p, kMagic, 6) != 0) throwBadInput(path, "not a .npy file (bad magic)");
  const int major = p[6];
  std::uint64_t headerLen = 0, headerStart = 0;
  if (major == 1) {
    headerLen = p[8] | (p[9] << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throwBadInput(path, "truncated .npy preamble");
    headerLen = static_cast<std::uint64_t>(p[8]) | (p[9] << 8) | (p[10] << 16) |
                (static_cast<std::uint64_t>(p[11]) << 24);
    headerStart = 12;
  } else {
    throwBadInput(path, "unsupported .npy format version " + std::to_string(major));
  }
  if (headerStart + headerLen > size) throwBadInput(path, ".npy header runs past the end of the file");

  std::string_view text(reinterpret_cast<const char*>(p + headerStart), headerLen);
  NpyHeader header = DictLiteralParser(text, path).parse();
  DescrInfo descr = decodeDescr(header.descr, path);

  std::uint64_t elements = 1;
  for (auto d : header.shape)
    if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements))
      throwBadInput(path, ".npy shape overflows");
  const auto declared = dtypeBytesFor(descr.dtype, elements);
  if (!declared) throwBadInput(path, ".npy shape overflows");
  const std::uint64_t nbytes = *declared;
  const std::uint64_t dataStart = headerStart + headerLen;
  if (size - dataStart != nbytes)
    throwBadInput(path, "data is " + std::to_string(size - dataStart) + " bytes, shape and dtype need " +
                            std::to_string(nbytes));

  HostTensor t;
  t.dtype = descr.dtype;
  t.shape = header.shape;
  t.nbytes = nbytes;
  const std::size_t elem = dtypeBits(descr.dtype) / 8;
  const bool needsOrder = header.fortranOrder && header.shape.size() > 1;
  if (!descr.bigEndian && !needsOrder) {
    t.data = p + dataStart;  // zero copy
    t.owner = std::move(map);
    return t;
  }
  auto buffer = std::make_shared<std::vector<std::uint8_t>>(nbytes);
  if (needsOrder)
    fortranToC(p + dataStart, buffer->data(), header.shape, elem);
  else if (nbytes > 0)  // an empty vector's data() may be null, which memcpy must not get
    std::memcpy(buffer->data(), p + dataStart, nbytes);
  swapToNative(buffer->data(), nbytes, descr.swapWidth, descr.bigEndian);
  t.data = buffer->data();
  t.owner = std::move(buffer);
  return t;
}

}  // namespace stoker
