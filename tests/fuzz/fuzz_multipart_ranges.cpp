// Fuzz target: a server's reply to a GET of several byte ranges (net/multipart_ranges), read into
// three asked ranges. Input: the Content-Type value, a newline, the Content-Range value (empty for
// a multipart/byteranges reply), a newline, then the body. The body is fed twice -- whole, and in
// pieces of 7 bytes -- and must give the same verdict and the same bytes: how the network cuts a
// reply must not change what is read.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "net/multipart_ranges.h"

using stoker::fuzz::check;

namespace {

struct Outcome {
  bool refused = false, overspent = false;
  std::vector<std::uint8_t> bytes;
  std::size_t got = 0;
};

Outcome readReply(const std::string& type, const std::string& range, const std::string& body, std::size_t step) {
  Outcome out;
  out.bytes.assign(160, 0);
  std::vector<stoker::ByteRange> ranges{{10, 10, out.bytes.data(), 0}, {100, 50, out.bytes.data() + 10, 0}, {900, 100, out.bytes.data() + 60, 0}};
  stoker::MultipartRangeReply reply(ranges);
  std::string why = reply.begin(type, range);
  for (std::size_t at = 0; why.empty() && !reply.overspent() && at < body.size(); at += step)
    why = reply.feed(body.data() + at, std::min(step, body.size() - at));
  out.refused = !why.empty();
  out.overspent = reply.overspent();
  out.got = reply.got();
  check(out.got <= reply.wanted(), "never more bytes than asked");
  for (const auto& r : ranges) check(r.got <= r.n, "a range holds at most its size");
  const std::string rest = stoker::rangesStillWanted(ranges);
  check(rest.empty() == (out.got == reply.wanted()), "a retry asks for something exactly when something is missing");
  return out;
}

}  // namespace

STOKER_FUZZ_TARGET(multipart_ranges) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const std::size_t a = in.find('\n');
  const std::size_t b = a == std::string::npos ? std::string::npos : in.find('\n', a + 1);
  if (b == std::string::npos) return;
  const std::string type = in.substr(0, a), range = in.substr(a + 1, b - a - 1), body = in.substr(b + 1);
  (void)stoker::byterangesBoundary(type);
  const Outcome whole = readReply(type, range, body, body.size() + 1);
  const Outcome pieces = readReply(type, range, body, 7);
  check(whole.refused == pieces.refused && whole.overspent == pieces.overspent, "the same verdict however the body is cut");
  if (!whole.refused && !whole.overspent)
    check(whole.got == pieces.got && whole.bytes == pieces.bytes, "the same bytes however the body is cut");
}
