// net/http_transfer: one HTTP GET of a byte range (or of a small text), through libcurl, with
// the retries a long epoch over the network needs.
//
// Retried with exponential backoff and full jitter: connection failures, stalls, dropped and
// truncated bodies (resumed at the byte where they broke, never read twice), 5xx, 429, 408.
// Not retried, and said plainly: 4xx (403 names the key id, never the secret; 404 says which
// object), a server that answers a Range with the whole body (200), a Content-Range or
// Content-Length that is not what was asked, an object whose ETag changed since it was opened,
// a TLS certificate that does not verify (STOKER_TLS_INSECURE=1 opts out; AWS_CA_BUNDLE or
// CURL_CA_BUNDLE names a CA file).
//
// Tuning (environment): STOKER_HTTP_ATTEMPTS (8), STOKER_HTTP_BACKOFF_MS (first backoff, 100;
// doubles up to 5 s), STOKER_HTTP_STALL_S (30: no byte for that long is a stall),
// STOKER_HTTP_CONNECT_TIMEOUT_S (10). Connections (and TLS sessions, DNS) are reused across
// requests and threads of a process through one curl share handle.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "net/multipart_ranges.h"
#include "net/s3_config.h"

namespace stoker {

class Error;

// Where a request goes and how it is signed.
struct HttpTarget {
  std::string url;      // the http(s) URL requested
  std::string display;  // what errors call it: the s3:// or http(s):// text the user wrote
  std::optional<S3Config> s3;  // SigV4-signed (curl's CURLOPT_AWS_SIGV4) unless anonymous
};

struct RangeReply {
  std::uint64_t objectSize = 0;  // allowShort's reads: from Content-Range (or Content-Length of a whole-body 200)
  std::string etag;
  std::size_t got = 0;  // bytes written to dst
};

// GET bytes [offset, offset + n) into dst. `etag` non-empty: the object must still have it
// (If-Match, and the reply's ETag compared). `allowShort`: the object may end before offset + n
// (the first read of an object, whose size is not known yet): the reply says how much came.
RangeReply httpGetRange(const HttpTarget& target, std::uint64_t offset, std::size_t n, std::uint8_t* dst,
                        const std::string& etag, bool allowShort = false);

// Receives a range's bytes in order as they arrive, each byte once (a retry resumes after the last
// byte it got). What it throws ends the request and reaches httpGetRange's caller.
using ByteSink = std::function<void(const std::uint8_t* data, std::size_t n)>;
// GET bytes [offset, offset + n) into `sink` (a part written to its cache file as it arrives).
RangeReply httpGetRange(const HttpTarget& target, std::uint64_t offset, std::size_t n, const ByteSink& sink,
                        const std::string& etag);

// GET several ranges of one object in one request (`Range: bytes=a-b,c-d,...`, the reply parsed by
// net/multipart_ranges): `ranges` sorted by offset, not overlapping; a retry asks only for the bytes
// not yet received. Returns false when the server does not serve several ranges at once (it
// answered 200, one part for only some of them, or one part spanning far more than was asked):
// the request stopped at the reply's first bytes, and the caller reads the ranges one each. A
// server that serves fewer ranges than asked in a whole reply (lighttpd: the first 10) is asked for
// the rest at once, no retry counted; `servedAtMost` (when given) gets the fewest it served, else 0.
bool httpGetRanges(const HttpTarget& target, std::vector<ByteRange>& ranges, const std::string& etag, int* servedAtMost = nullptr);

// GET a whole small response (an S3 listing) of at most maxBytes.
std::string httpGetText(const HttpTarget& target, std::size_t maxBytes);

// True for the error a 404 reply becomes: the object (or bucket) is not there. Callers that probe
// for one of several names (a folder URL's index, else its model file) go on to the next.
bool isNotFound(const Error& e);
// True for the error a 403 reply becomes. S3 answers 403, not 404, for a missing key when the caller
// may not list the bucket, so a probe takes it as "not there" too unless nothing else is.
bool isForbidden(const Error& e);

// What this process has asked the network for (the Stages tab's network line, tests, benchmarks).
struct NetCounters {
  std::atomic<std::uint64_t> requests{0}, bytes{0}, retries{0}, nanoseconds{0};
};
NetCounters& netCounters();
// Seconds this thread has spent in requests that succeeded (a dataset's "read" stage without a
// clock call per sample: read it before and after).
double networkSecondsOnThisThread();

}  // namespace stoker
