#include "io/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace stoker {
namespace {

std::string inQuotes(const std::string& s) { return "\"" + s + "\""; }

// A SAX consumer that accepts only the header's shape and stops at the first
// deviation, so a hostile header (200,000 nested brackets, huge arrays of the
// wrong type) costs no more than reading up to the offending byte.
class HeaderSax {
 public:
  using json = nlohmann::json;

  std::string error;
  SafetensorsHeader header;

  bool null() {
    if (state_ == State::ExpectMetadata) return to(State::Root);  // "__metadata__": null is allowed
    return unexpected("null");
  }
  bool boolean(bool) { return unexpected("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    if (v < 0 && (state_ == State::InShape || state_ == State::InOffsets))
      return fail(fieldSubject() + " holds a negative number (" + std::to_string(v) + ")");
    return unexpected("a number");
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (state_ == State::InShape) {
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return fail(fieldSubject() + " has a dimension too large (" + std::to_string(v) + ")");
      current_.shape.push_back(static_cast<std::int64_t>(v));
      return true;
    }
    if (state_ == State::InOffsets) {
      if (offsets_.size() == 2) return fail(tensorSubject() + ": data_offsets has more than 2 entries");
      offsets_.push_back(v);
      return true;
    }
    return unexpected("a number");
  }
  bool number_float(json::number_float_t, const std::string& text) {
    if (state_ == State::InShape || state_ == State::InOffsets)
      return fail(fieldSubject() + " holds " + text + ", not a non-negative integer");
    return unexpected("a number");
  }
  bool string(std::string& s) {
    switch (state_) {
      case State::ExpectDtype: {
        auto d = dtypeFromName(s);
        if (!d) return fail(tensorSubject() + ": unknown dtype " + inQuotes(s));
        current_.dtype = *d;
        return to(State::InTensor);
      }
      case State::ExpectMetadataString:
        header.metadata[metadataKey_] = std::move(s);
        return to(State::InMetadata);
      default:
        return unexpected("a string");
    }
  }
  bool binary(json::binary_t&) { return fail("header holds binary data"); }

  bool start_object(std::size_t) {
    switch (state_) {
      case State::Start: return to(State::Root);
      case State::ExpectTensor:
        current_ = SafetensorsEntry{};
        current_.name = name_;
        fields_.clear();
        offsets_.clear();
        return to(State::InTensor);
      case State::ExpectMetadata: return to(State::InMetadata);
      case State::Skip: return deeper();
      default: return unexpected("an object");
    }
  }
  bool end_object() {
    switch (state_) {
      case State::Root: return to(State::Done);
      case State::InMetadata: return to(State::Root);
      case State::InTensor: return finishTensor();
      case State::Skip: return shallower();
      default: return fail("unexpected end of object");
    }
  }
  bool start_array(std::size_t) {
    switch (state_) {
      case State::ExpectShape: return to(State::InShape);
      case State::ExpectOffsets: return to(State::InOffsets);
      case State::Skip: return deeper();
      default: return unexpected("an array");
    }
  }
  bool end_array() {
    switch (state_) {
      case State::InShape: return to(State::InTensor);
      case State::InOffsets:
        if (offsets_.size() != 2)
          return fail(tensorSubject() + ": data_offsets has " + std::to_string(offsets_.size()) +
                      " entries, expected 2");
        current_.begin = offsets_[0];
        current_.end = offsets_[1];
        return to(State::InTensor);
      case State::Skip: return shallower();
      default: return fail("unexpected end of array");
    }
  }
  bool key(std::string& k) {
    switch (state_) {
      case State::Root:
        if (!topKeys_.insert(k).second) return fail("duplicate entry " + inQuotes(k));
        if (k == "__metadata__") {
          header.hasMetadata = true;
          return to(State::ExpectMetadata);
        }
        name_ = k;
        return to(State::ExpectTensor);
      case State::InMetadata:
        if (header.metadata.count(k)) return fail("__metadata__ has duplicate key " + inQuotes(k));
        metadataKey_ = k;
        return to(State::ExpectMetadataString);
      case State::InTensor:
        if (!fields_.insert(k).second) return fail(tensorSubject() + ": duplicate field " + inQuotes(k));
        field_ = k;
        if (k == "dtype") return to(State::ExpectDtype);
        if (k == "shape") return to(State::ExpectShape);
        if (k == "data_offsets") return to(State::ExpectOffsets);
        // The official parser ignores unknown fields; so do we, bounded.
        skipDepth_ = 0;
        return to(State::Skip);
      case State::Skip: return true;
      default: return fail("unexpected key " + inQuotes(k));
    }
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    if (error.empty()) {
      std::string what = ex.what();
      // nlohmann's message repeats the position; keep its tail, which says why.
      auto colon = what.rfind(": ");
      error = "header is not valid JSON at byte " + std::to_string(position) + ": " +
              (colon == std::string::npos ? what : what.substr(colon + 2));
    }
    return false;
  }

  bool done() const { return state_ == State::Done; }

 private:
  enum class State {
    Start, Root, ExpectMetadata, InMetadata, ExpectMetadataString, ExpectTensor, InTensor,
    ExpectDtype, ExpectShape, InShape, ExpectOffsets, InOffsets, Skip, Done,
  };
  static constexpr int kMaxSkipDepth = 128;  // serde_json's own recursion limit

  bool to(State s) {
    state_ = s;
    return true;
  }
  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string tensorSubject() const { return "tensor " + inQuotes(name_); }
  std::string fieldSubject() const { return tensorSubject() + ": " + field_; }

  // A value of kind `what` ("a number", "an array", ...) where the state
  // expects something else; inside a skipped unknown field anything goes.
  bool unexpected(const char* what) {
    const std::string is = std::string(" is ") + what;
    switch (state_) {
      case State::Start: return fail("header is not a JSON object");
      case State::ExpectTensor: return fail(tensorSubject() + ": entry" + is + ", not an object");
      case State::ExpectMetadataString:
        return fail("__metadata__ value for " + inQuotes(metadataKey_) + is + ", not a string");
      case State::ExpectMetadata: return fail("__metadata__" + is + ", not an object of strings");
      case State::ExpectDtype: return fail(tensorSubject() + ": dtype" + is + ", not a string");
      case State::ExpectShape: case State::ExpectOffsets: return fail(fieldSubject() + is + ", not an array");
      case State::InShape: case State::InOffsets:
        return fail(fieldSubject() + " holds " + what + ", not a non-negative integer");
      case State::Skip:
        if (skipDepth_ == 0) return to(State::InTensor);  // scalar value of an unknown field
        return true;
      default: return fail(std::string("unexpected ") + what);
    }
  }
  bool deeper() {
    if (++skipDepth_ > kMaxSkipDepth)
      return fail(tensorSubject() + ": field " + inQuotes(field_) + " nests deeper than " +
                  std::to_string(kMaxSkipDepth) + " levels");
    return true;
  }
  bool shallower() {
    if (--skipDepth_ == 0) return to(State::InTensor);
    return true;
  }
  bool finishTensor() {
    for (const char* required : {"dtype", "shape", "data_offsets"})
      if (!fields_.count(required)) return fail(tensorSubject() + ": missing " + required);
    header.tensors.push_back(std::move(current_));
    return to(State::Root);
  }

  State state_ = State::Start;
  int skipDepth_ = 0;
  std::set<std::string> topKeys_;
  std::set<std::string> fields_;
  std::string name_, field_, metadataKey_;
  std::vector<std::uint64_t> offsets_;
  SafetensorsEntry current_;
};

void validateLayout(SafetensorsHeader& h, std::uint64_t fileSize, const std::string& subject) {
  for (const auto& t : h.tensors) {
    const std::string who = "tensor " + inQuotes(t.name);
    std::uint64_t elements = 1;
    for (auto d : t.shape)
      if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(d), &elements))
        throwBadInput(subject, who + ": shape " + shapeText(t.shape) + " overflows");
    auto bytes = dtypeBytesFor(t.dtype, elements);
    if (!bytes)
      throwBadInput(subject, who + ": shape " + shapeText(t.shape) + " x " +
                                 std::string(dtypeName(t.dtype)) +
                                 " overflows or does not end on a byte");
    if (t.end < t.begin)
      throwBadInput(subject, who + ": data_offsets [" + std::to_string(t.begin) + ", " +
                                 std::to_string(t.end) + "] end before they start");
    if (t.end - t.begin != *bytes)
      throwBadInput(subject, who + ": data_offsets span " + std::to_string(t.end - t.begin) +
                                 " bytes but shape " + shapeText(t.shape) + " x " +
                                 std::string(dtypeName(t.dtype)) + " needs " +
                                 std::to_string(*bytes));
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin > expected)
      throwBadInput(subject, "hole of " + std::to_string(t.begin - expected) + " bytes " +
                                 (previous ? "between tensors " + inQuotes(previous->name) + " and "
                                           : std::string("before tensor ")) +
                                 inQuotes(t.name));
    if (t.begin < expected)
      throwBadInput(subject, "tensors " + inQuotes(previous->name) + " and " + inQuotes(t.name) +
                                 " overlap");
    expected = t.end;
    previous = &t;
  }
  std::uint64_t needed = 0;
  if (__builtin_add_overflow(h.dataStart(), expected, &needed) || needed > fileSize)
    throwBadInput(subject, "tensor data runs past the end of the file (" +
                               std::to_string(expected) + " data bytes declared, " +
                               std::to_string(fileSize - h.dataStart()) + " present)");
  if (needed < fileSize)
    throwBadInput(subject, std::to_string(fileSize - needed) +
                               " bytes after the last tensor: the data is shorter than the file");
}

}  // namespace

bool isValidUtf8(const std::uint8_t* p, std::size_t n) {
  std::size_t i = 0;
  while (i < n) {
    std::uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

SafetensorsHeader parseSafetensorsHeader(const std::uint8_t* file, std::uint64_t available,
                                         std::uint64_t fileSize, const std::string& subject) {
  if (fileSize < 8)
    throwBadInput(subject, "file is " + std::to_string(fileSize) +
                               " bytes, shorter than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];  // little-endian u64
  if (n > kSafetensorsMaxHeaderBytes)
    throwBadInput(subject, "header length " + std::to_string(n) + " exceeds the limit of " +
                               std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  if (8 + n > fileSize)
    throwBadInput(subject, "header length " + std::to_string(n) +
                               " runs past the end of the file (" + std::to_string(fileSize) +
                               " bytes)");
  if (8 + n > available)
    throw Error(ErrorKind::Internal, subject, "header not fully available to the parser");
  const std::uint8_t* json = file + 8;
  if (!isValidUtf8(json, n)) throwBadInput(subject, "header is not valid UTF-8");
  if (n == 0 || json[0] != '{') throwBadInput(subject, "header is not a JSON object (must start with '{')");

  HeaderSax sax;
  bool ok = nlohmann::json::sax_parse(json, json + n, &sax);
  if (!ok || !sax.done())
    throwBadInput(subject, sax.error.empty() ? "header is not a JSON object" : sax.error);
  sax.header.headerBytes = n;
  validateLayout(sax.header, fileSize, subject);
  return std::move(sax.header);
}

}  // namespace stoker
