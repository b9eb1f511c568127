// net/multipart_ranges: the reply to one GET that asks for several byte ranges at once
// (`Range: bytes=a-b,c-d,...`, RFC 9110 14.2): a 206 whose body is multipart/byteranges, one
// part per range, each with its own Content-Range -- or, where the server joined the ranges, a
// single part. A batch of random token windows is then one request instead of 64: a request's
// cost (a round trip far from the server, the server's and curl's work per request near it) is
// paid once per batch.
//
// The parser is fed the body as it arrives and copies each part's bytes into the ranges asked
// for; it never trusts the server further than it checks: a part must carry a Content-Range
// inside the object, a range's bytes must arrive in order (none skipped), a part's header block
// is bounded, and whatever does not match is refused (the caller's request fails with the
// reason), never copied. Bytes a part holds outside every asked range (a server that joined two
// near ranges into one part), or again, are skipped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

// One range asked for: its bytes go to dst[0, n); `got` counts the bytes already there (a retry
// asks only for [offset + got, offset + n)).
struct ByteRange {
  std::uint64_t offset = 0;
  std::size_t n = 0;
  std::uint8_t* dst = nullptr;
  std::size_t got = 0;
};

// The Range header's value for what `ranges` still lack: "a-b,c-d" (no "bytes=").
std::string rangesStillWanted(const std::vector<ByteRange>& ranges);

// The boundary of a `multipart/byteranges; boundary=...` Content-Type; empty for any other type.
std::string byterangesBoundary(const std::string& contentType);

class MultipartRangeReply {
 public:
  // `ranges`: sorted by offset, not overlapping, each n > 0; they outlive the parser.
  explicit MultipartRangeReply(std::vector<ByteRange>& ranges) : ranges_(ranges) {}

  // A new reply begins (each attempt of a request): its Content-Type and, for a single part,
  // Content-Range. Returns why the reply cannot be read (a 206 with neither a multipart type nor
  // a Content-Range), else empty.
  std::string begin(const std::string& contentType, const std::string& contentRange);
  // The next body bytes. Returns why they are refused, else empty.
  std::string feed(const char* data, std::size_t n);

  // Bytes in the ranges, all replies so far (what the request has got of what it wants).
  std::size_t got() const;
  std::size_t wanted() const;
  // This reply was one part only: a server that answers several ranges with the first alone
  // (or joined them) ends the request without filling every range.
  bool onePart() const { return !multipart_; }
  // The multipart reply ended with its closing delimiter, having carried `parts()` parts: a server
  // that serves fewer ranges than asked (lighttpd serves the first 10) ends this way, where a
  // dropped connection does not.
  bool closed() const { return done_; }
  int parts() const { return parts_; }
  // The reply carried far more bytes outside the asked ranges than in them (a server that answers
  // scattered ranges with one part spanning them all): feed() stopped taking bytes. Not an error
  // in the data; the caller reads the ranges one request each instead.
  bool overspent() const { return overspent_; }

 private:
  std::string startPart(const std::string& contentRange);
  std::string deliver(const char* data, std::size_t n);

  std::vector<ByteRange>& ranges_;
  bool multipart_ = false;
  bool done_ = false;             // the closing delimiter was seen: the rest is the epilogue
  std::string boundary_;          // "--" + the boundary
  std::string headers_;           // a part's delimiter and headers while they arrive
  std::uint64_t at_ = 0;          // the object position of the next body byte of the current part
  std::uint64_t left_ = 0;        // bytes of the current part still to come
  std::uint64_t objectSize_ = 0;  // from the first Content-Range (0: not known yet)
  std::uint64_t budget_ = 0;      // part bytes this reply may carry: twice what it lacks, and 64 KiB
  bool overspent_ = false;
  int parts_ = 0;  // parts begun in this reply
};

}  // namespace stoker
