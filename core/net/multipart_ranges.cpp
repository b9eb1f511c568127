#include "net/multipart_ranges.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace stoker {
namespace {

// A part's delimiter line and headers take a hundred bytes from nginx or Apache; more than this
// before the blank line that ends them is not a reply to read.
constexpr std::size_t kMaxPartHeaders = 16 * 1024;

std::string lowered(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string rangesStillWanted(const std::vector<ByteRange>& ranges) {
  std::string out;
  for (const ByteRange& r : ranges) {
    if (r.got >= r.n) continue;
    if (!out.empty()) out += ',';
    out += std::to_string(r.offset + r.got) + "-" + std::to_string(r.offset + r.n - 1);
  }
  return out;
}

std::string byterangesBoundary(const std::string& contentType) {
  const std::string low = lowered(contentType);
  const std::size_t type = low.find_first_not_of(" \t");
  if (type == std::string::npos || low.compare(type, 20, "multipart/byteranges") != 0) return {};
  const std::size_t key = low.find("boundary=", type + 20);
  if (key == std::string::npos) return {};
  std::string value = contentType.substr(key + 9);
  if (!value.empty() && value[0] == '"') {
    const std::size_t close = value.find('"', 1);
    return close == std::string::npos ? std::string() : value.substr(1, close - 1);
  }
  return value.substr(0, value.find_first_of("; \t"));
}

std::size_t MultipartRangeReply::got() const {
  std::size_t sum = 0;
  for (const ByteRange& r : ranges_) sum += r.got;
  return sum;
}

std::size_t MultipartRangeReply::wanted() const {
  std::size_t sum = 0;
  for (const ByteRange& r : ranges_) sum += r.n;
  return sum;
}

std::string MultipartRangeReply::begin(const std::string& contentType, const std::string& contentRange) {
  headers_.clear();
  at_ = left_ = 0;
  done_ = overspent_ = false;
  parts_ = 0;
  budget_ = 2 * static_cast<std::uint64_t>(wanted() - got()) + 64 * 1024;
  const std::string boundary = byterangesBoundary(contentType);
  multipart_ = !boundary.empty();
  if (multipart_) {
    boundary_ = "--" + boundary;
    return {};
  }
  if (contentRange.empty()) return "a 206 reply to several ranges with neither a multipart/byteranges body nor a Content-Range";
  return startPart(contentRange);
}

std::string MultipartRangeReply::startPart(const std::string& contentRange) {
  unsigned long long first = 0, last = 0, total = 0;
  char star = 0;
  const bool sized = std::sscanf(contentRange.c_str(), "bytes %llu-%llu/%llu", &first, &last, &total) == 3;
  if (!sized && std::sscanf(contentRange.c_str(), "bytes %llu-%llu/%c", &first, &last, &star) != 3)
    return "a part's Content-Range \"" + contentRange.substr(0, 100) + "\" is not \"bytes FIRST-LAST/SIZE\"";
  if (last < first || (sized && last >= total))
    return "a part's Content-Range \"" + contentRange.substr(0, 100) + "\" is not a range of the object";
  if (sized && objectSize_ && total != objectSize_)
    return "a part's Content-Range says the object has " + std::to_string(total) + " bytes, an earlier one " +
           std::to_string(objectSize_);
  if (sized) objectSize_ = total;
  ++parts_;
  at_ = first;
  left_ = last - first + 1;
  return {};
}

std::string MultipartRangeReply::deliver(const char* data, std::size_t n) {
  const std::uint64_t end = at_ + n;
  auto r = std::partition_point(ranges_.begin(), ranges_.end(), [&](const ByteRange& x) { return x.offset + x.n <= at_; });
  for (; r != ranges_.end() && r->offset < end; ++r) {
    const std::uint64_t lo = std::max<std::uint64_t>(at_, r->offset), hi = std::min<std::uint64_t>(end, r->offset + r->n);
    const std::uint64_t expected = r->offset + r->got;
    if (lo > expected)
      return "the server skipped bytes " + std::to_string(expected) + "-" + std::to_string(lo - 1) + " of a range it was asked for";
    if (hi <= expected) continue;  // sent again (a part joining a range that had come whole): kept once
    std::memcpy(r->dst + (expected - r->offset), data + (expected - at_), static_cast<std::size_t>(hi - expected));
    r->got += static_cast<std::size_t>(hi - expected);
  }
  at_ = end;
  left_ -= n;
  return {};
}

std::string MultipartRangeReply::feed(const char* data, std::size_t n) {
  while (n > 0 && !done_) {
    if (left_ > 0 || !multipart_) {
      if (left_ == 0) return "the server sent more bytes than its Content-Range holds";
      if (budget_ == 0) {
        overspent_ = true;
        return {};
      }
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>({n, left_, budget_}));
      budget_ -= take;
      if (std::string why = deliver(data, take); !why.empty()) return why;
      data += take;
      n -= take;
      continue;
    }
    // Between parts: a delimiter line, the part's headers, a blank line (or the closing delimiter).
    const std::size_t before = headers_.size();
    // At most kMaxPartHeaders bytes between parts, however the body arrives in pieces.
    const std::size_t take = std::min(n, kMaxPartHeaders - before);
    headers_.append(data, take);
    const std::size_t d = headers_.find(boundary_);
    std::size_t used = take;  // of this feed's bytes, what the headers took
    if (d != std::string::npos && headers_.size() >= d + boundary_.size() + 2) {
      if (headers_.compare(d + boundary_.size(), 2, "--") == 0) {
        done_ = true;  // the closing delimiter: what follows is the epilogue
        return {};
      }
      const std::size_t blank = headers_.find("\r\n\r\n", d + boundary_.size());
      if (blank != std::string::npos) {
        std::string contentRange;
        for (std::size_t line = headers_.find("\r\n", d); line < blank;) {
          const std::size_t next = headers_.find("\r\n", line + 2);
          const std::string text = headers_.substr(line + 2, next - line - 2);
          if (const std::size_t colon = text.find(':');
              colon != std::string::npos && lowered(text.substr(0, colon)) == "content-range") {
            contentRange = text.substr(colon + 1);
            contentRange.erase(0, contentRange.find_first_not_of(" \t"));
          }
          line = next;
        }
        if (contentRange.empty()) return "a part of the multipart/byteranges reply has no Content-Range";
        if (std::string why = startPart(contentRange); !why.empty()) return why;
        used = blank + 4 - before;
        headers_.clear();
      }
    }
    if (headers_.size() >= kMaxPartHeaders)
      return "no part delimiter and headers in " + std::to_string(headers_.size()) + " bytes of the multipart/byteranges reply";
    data += used;
    n -= used;
  }
  return {};
}

}  // namespace stoker
