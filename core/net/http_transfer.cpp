#include "net/http_transfer.h"

#include <curl/curl.h>
#include <pugixml.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "net/multipart_ranges.h"
#include "util/byte_vector.h"
#include "util/error.h"
#include "util/open_progress.h"

namespace stoker {
namespace {

thread_local double tlsNetworkSeconds = 0;  // networkSecondsOnThisThread()

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

long envLong(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi) throwBadInput(std::string(name) + "=" + v, "must be " + std::to_string(lo) + "-" + std::to_string(hi));
  return x;
}

// One share handle per process: DNS answers and TLS sessions are reused by every request. Not the
// connections: curl's shared connection cache is not safe between concurrent threads (curl's known
// bug 11.11, "a shared connection cache is not thread-safe"; it crashed inside libcurl in
// tst_remote under load). Connections are kept by the easy handles of the pool below instead.
class Share {
 public:
  Share() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    share_ = curl_share_init();
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &Share::lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &Share::unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  CURLSH* get() const { return share_; }

 private:
  static void lock(CURL*, curl_lock_data data, curl_lock_access, void* self) {
    static_cast<Share*>(self)->mutexes_[static_cast<std::size_t>(data) % kLocks].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* self) {
    static_cast<Share*>(self)->mutexes_[static_cast<std::size_t>(data) % kLocks].unlock();
  }
  static constexpr std::size_t kLocks = 8;
  std::mutex mutexes_[kLocks];
  CURLSH* share_ = nullptr;  // never freed: requests may run until the process exits
};

CURLSH* sharedHandle() {
  static Share* share = new Share;
  return share->get();
}

// Easy handles lent to one request at a time and given back after it, most recently used first.
// Each keeps the connections it opened (curl caches them per handle), so a request reuses one a
// finished request left open, whichever thread made it: the threads that fetch parts live for one
// read. The pool grows to the most requests ever in flight at once; never freed (see Share).
class HandleLease {
 public:
  HandleLease() {
    sharedHandle();  // curl_global_init first
    std::lock_guard<std::mutex> lock(mutex());
    if (free().empty()) {
      handle_ = curl_easy_init();
    } else {
      handle_ = free().back();
      free().pop_back();
    }
    if (!handle_) throw Error(ErrorKind::OutOfMemory, "HTTP", "curl_easy_init failed");
  }
  ~HandleLease() {
    std::lock_guard<std::mutex> lock(mutex());
    free().push_back(handle_);
  }
  HandleLease(const HandleLease&) = delete;
  HandleLease& operator=(const HandleLease&) = delete;
  // Reset for a new attempt (curl_easy_reset keeps the handle's connections).
  CURL* fresh() {
    curl_easy_reset(handle_);
    return handle_;
  }

 private:
  static std::mutex& mutex() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::vector<CURL*>& free() {
    static auto* handles = new std::vector<CURL*>;
    return *handles;
  }
  CURL* handle_ = nullptr;
};

struct Transfer {
  CURL* curl = nullptr;
  std::uint8_t* dst = nullptr;     // the range's bytes go here, or to sink; neither: collect into text
  const ByteSink* sink = nullptr;
  MultipartRangeReply* multi = nullptr;  // several ranges in one request (httpGetRanges)
  bool multiBegun = false;               // this reply's headers were handed to `multi`
  bool replyChecked = false;             // this attempt's reply passed the checks on its first bytes
  bool versionChecked = false;           // this attempt's ETag was compared with the bytes' so far
  std::string pinnedEtag;                // the caller's ETag, else the first reply's with bytes
  bool multiDeclined = false;            // the server does not serve several ranges at once
  int multiAsked = 0;                    // ranges this attempt asked for
  int multiServed = 0;                   // the fewest parts a closed reply to more ranges carried (0: none such)
  std::exception_ptr sinkFailure;  // what the sink threw (it must not cross curl's C frames)
  const CancelToken* cancel = nullptr;  // the open's, where one is installed (abortWhenCancelled)
  std::size_t want = 0, got = 0;
  std::uint64_t wantStart = 0;
  bool rangeAsked = false, allowShort = false;
  long status = 0;
  std::string etag, contentRange, contentType, text, errorBody, refused;
  std::int64_t contentLength = -1;
  std::size_t maxText = 0;
};

std::string lowered(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t onHeader(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * count);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue or a redirect): start over
    const std::size_t sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    t->etag.clear();
    t->contentRange.clear();
    t->contentType.clear();
    t->contentLength = -1;
    return size * count;
  }
  const std::size_t colon = line.find(':');
  if (colon == std::string::npos) return size * count;
  const std::string name = lowered(line.substr(0, colon));
  std::string value = line.substr(colon + 1);
  value.erase(0, value.find_first_not_of(" \t"));
  if (name == "etag") t->etag = value;
  else if (name == "content-range") t->contentRange = value;
  else if (name == "content-type") t->contentType = value;
  else if (name == "content-length") t->contentLength = std::atoll(value.c_str());
  return size * count;
}

// Hands n body bytes of a range on: copied to dst, or given to the sink. False: the sink threw.
bool deliver(Transfer* t, const char* data, std::size_t n) {
  if (t->dst) {
    std::memcpy(t->dst + t->got, data, n);
  } else {
    try {
      (*t->sink)(reinterpret_cast<const std::uint8_t*>(data), n);
    } catch (...) {
      t->sinkFailure = std::current_exception();
      return false;
    }
  }
  t->got += n;
  return true;
}

// The body of a reply to several ranges: parsed as it comes (net/multipart_ranges). A 200 (the
// server ignores a Range of several ranges, as RFC 9110 lets it) or one part spanning far more
// than was asked is declined at its first bytes, before the whole object downloads.
std::size_t onMultiRangeBody(Transfer* t, const char* data, std::size_t n) {
  if (t->status != 206) {
    t->multiDeclined = true;
    return 0;
  }
  if (!t->multiBegun) {
    t->multiBegun = true;
    if (std::string why = t->multi->begin(t->contentType, t->contentRange); !why.empty()) {
      t->refused = why;
      return 0;
    }
  }
  if (std::string why = t->multi->feed(data, n); !why.empty()) {
    t->refused = why;
    return 0;
  }
  if (t->multi->overspent()) {
    t->multiDeclined = true;
    return 0;
  }
  t->got = t->multi->got();
  return n;
}

std::size_t onBody(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  if (t->status >= 300 || t->status < 200) {  // an error page: keep its start for the message
    t->errorBody.append(data, std::min(n, std::size_t(8192) - std::min(t->errorBody.size(), std::size_t(8192))));
    return n;
  }
  if (!t->versionChecked && (t->dst || t->sink || t->multi)) {
    // A range read keeps every attempt's bytes (a retry resumes where the last broke), so every
    // attempt's ETag is compared, not only the last one's: a replica with the old version that
    // dropped the connection, then the new version resumed, made one part of two versions. (A
    // text's retry starts over: its bytes are one version.)
    t->versionChecked = true;
    if (!t->etag.empty()) {
      if (t->pinnedEtag.empty()) {
        t->pinnedEtag = t->etag;
      } else if (t->etag != t->pinnedEtag) {
        t->refused = "the object changed while it was read (ETag " + t->etag + ", the bytes before came with " +
                     t->pinnedEtag + "): reading on would mix two versions; open the dataset again";
        return 0;
      }
    }
  }
  if (t->multi) return onMultiRangeBody(t, data, n);
  if (!t->dst && !t->sink) {
    if (t->text.size() + n > t->maxText) {
      t->refused = "the reply is larger than " + std::to_string(t->maxText) + " bytes";
      return 0;
    }
    t->text.append(data, n);
    return n;
  }
  if (t->got == 0 && t->dst) {  // what the reply will fill goes on huge pages (util/byte_vector)
    const std::uint64_t fills = t->contentLength >= 0 ? std::min<std::uint64_t>(t->want, static_cast<std::uint64_t>(t->contentLength)) : 0;
    adviseFilledHugePages(t->dst, static_cast<std::size_t>(fills));
  }
  // The first bytes of each attempt's reply: is it the range that was asked for? A retry's reply
  // too (wantStart is where it resumes): checked only while nothing had come, a 200 with the
  // whole object to a retry after a dropped body was spliced in after the bytes already read.
  if (!t->replyChecked) {
    t->replyChecked = true;
    if (t->rangeAsked && t->status == 200 && t->wantStart > 0) {
      t->refused = "the server ignored the Range request (200 with the whole object): it cannot serve parts";
      return 0;
    }
    if (t->status == 206) {
      unsigned long long first = 0, last = 0;
      if (std::sscanf(t->contentRange.c_str(), "bytes %llu-%llu", &first, &last) != 2 || first != t->wantStart) {
        t->refused = "asked for bytes from " + std::to_string(t->wantStart) + ", the server sent Content-Range \"" + t->contentRange + "\"";
        return 0;
      }
      if (t->contentLength >= 0 && last >= first && static_cast<std::uint64_t>(t->contentLength) != last - first + 1) {
        t->refused = "Content-Length " + std::to_string(t->contentLength) + " disagrees with Content-Range \"" + t->contentRange + "\"";
        return 0;
      }
    }
  }
  if (t->got + n > t->want) {
    // A whole-body 200 got here only for a read from byte 0 (refused above otherwise): keep what fits.
    if (t->allowShort || (t->rangeAsked && t->status == 200)) {
      const std::size_t take = t->want - t->got;
      if (!deliver(t, data, take)) return 0;
      return take == n ? n : 0;
    }
    t->refused = "the server sent more bytes than asked (" + std::to_string(t->want) + ")";
    return 0;
  }
  return deliver(t, data, n) ? n : 0;
}

// S3's <Error><Code>…</Code><Message>…</Message></Error>, or the first line of a page.
std::string errorDetail(const std::string& body) {
  pugi::xml_document doc;
  if (doc.load_string(body.c_str())) {
    const pugi::xml_node e = doc.child("Error");
    if (e) return std::string(e.child_value("Code")) + ": " + e.child_value("Message");
  }
  // An HTML error page: its <title> ("403 Forbidden" says no more than the status).
  if (const std::size_t a = body.find("<title>"); a != std::string::npos) {
    const std::size_t b = body.find("</title>", a);
    const std::string title = body.substr(a + 7, b == std::string::npos ? 0 : b - a - 7);
    return title.size() > 3 && std::isdigit(static_cast<unsigned char>(title[0])) ? std::string() : title.substr(0, 200);
  }
  std::string first = body.substr(0, body.find('\n')).substr(0, 200);
  for (auto& c : first)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return first;
}

bool retryableCurl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT: case CURLE_PARTIAL_FILE: case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING: case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY:
      return true;
    default:
      return false;
  }
}

bool retryableStatus(long s) { return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

struct Settings {
  long attempts, backoffMs, stallS, connectS;
  bool insecure;
  std::string caFile;
};

Settings settings() {
  Settings s{envLong("STOKER_HTTP_ATTEMPTS", 8, 1, 100), envLong("STOKER_HTTP_BACKOFF_MS", 100, 0, 600000),
             envLong("STOKER_HTTP_STALL_S", 30, 1, 3600), envLong("STOKER_HTTP_CONNECT_TIMEOUT_S", 10, 1, 600), false, {}};
  const char* insecure = std::getenv("STOKER_TLS_INSECURE");
  s.insecure = insecure && (std::strcmp(insecure, "1") == 0 || std::strcmp(insecure, "true") == 0);
  for (const char* name : {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE"})
    if (const char* v = std::getenv(name); v && *v) {
      s.caFile = v;
      break;
    }
  return s;
}

void sleepBackoff(const Settings& s, int attempt, const CancelToken* cancel) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const double cap = std::min(5000.0, s.backoffMs * std::pow(2.0, attempt));
  std::uniform_real_distribution<double> jitter(0.0, cap);  // "full jitter": spreads retrying ranks apart
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<long long>(jitter(rng) * 1000));
  while (std::chrono::steady_clock::now() < until && !(cancel && cancel->cancelled()))
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(50),
                                                                               until - std::chrono::steady_clock::now()));
}

// An open the user stops (util/open_progress: the workbench's Cancel, Ctrl-C in Python) ends the
// transfer in flight within curl's progress tick, not after the stall timeout of every retry
// (8 x 30 s by default on a server that stopped answering).
int abortWhenCancelled(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const CancelToken*>(cancel)->cancelled() ? 1 : 0;
}

// curl receives into a 16 KiB buffer by default, so a part of several MiB cost a recv() and a
// write callback per 16 KiB. A range read gets a buffer as large as its body, at most 512 KiB:
// held only while that read is in flight (each in-flight part holds more than that itself), and
// a small read -- an image, a token window -- keeps the default.
long receiveBufferFor(const std::string& ranges) {
  constexpr long kDefault = 16 * 1024, kMost = 512 * 1024;
  long long bytes = 0;
  for (std::size_t at = 0; at < ranges.size();) {  // "a-b" or "a-b,c-d,...": the sum of their sizes
    const std::size_t comma = std::min(ranges.find(',', at), ranges.size());
    const std::string range = ranges.substr(at, comma - at);
    at = comma + 1;
    const auto dash = range.find('-');
    if (dash == std::string::npos || dash + 1 >= range.size()) return kDefault;
    try {
      bytes += std::stoll(range.substr(dash + 1)) - std::stoll(range.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return kDefault;
    }
  }
  return static_cast<long>(std::clamp<long long>(bytes, kDefault, kMost));
}

// Sets up `t.curl` for one attempt at target (the Range and If-Match already in `headers`).
void prepare(Transfer& t, const HttpTarget& target, const Settings& s, curl_slist*& headers, const std::string& range,
             const std::string& etag) {
  CURL* c = t.curl;
  curl_easy_setopt(c, CURLOPT_SHARE, sharedHandle());
  curl_easy_setopt(c, CURLOPT_URL, target.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  // A signed request follows no redirect: at another host curl drops the signature but not the
  // session token (x-amz-security-token, a header of ours), which would reach whoever the Location
  // names, and the request would arrive unsigned anyway. The 3xx says itself (statusWords).
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, target.s3 && !target.s3->anonymous() ? 0L : 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, s.connectS);
  // A stall is less than 1 KiB/s over STOKER_HTTP_STALL_S, not only no byte at all: a proxy that
  // trickled 100 B/s held an 8 MiB part (and every reader waiting for it, and the loader's close)
  // for a day. The retry resumes at the byte where it broke.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, s.stallS);
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "identity");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, receiveBufferFor(range));
  if (s.insecure) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!s.caFile.empty()) {
    curl_easy_setopt(c, CURLOPT_CAINFO, s.caFile.c_str());
  }
  if (!range.empty()) headers = curl_slist_append(headers, ("Range: bytes=" + range).c_str());
  // A weak ETag (W/"…") never matches If-Match (RFC 9110's strong comparison): for those the
  // reply's ETag is compared alone.
  if (!etag.empty() && etag.rfind("W/", 0) != 0) headers = curl_slist_append(headers, ("If-Match: " + etag).c_str());
  // S3 keys are names, not paths: curl would collapse "a/../b" to "b" (and sign that), and read
  // another object than the one listed.
  if (target.s3) curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
  if (target.s3 && !target.s3->anonymous()) {
    // curl 7.88 signs with the hash of the (empty) body but does not send it; S3 requires it.
    headers = curl_slist_append(headers, (std::string("x-amz-content-sha256: ") + kEmptySha256).c_str());
    if (!target.s3->sessionToken.empty())
      headers = curl_slist_append(headers, ("x-amz-security-token: " + target.s3->sessionToken).c_str());
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, ("aws:amz:" + target.s3->region + ":s3").c_str());
    curl_easy_setopt(c, CURLOPT_USERNAME, target.s3->accessKeyId.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, target.s3->secretAccessKey.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (t.cancel) {
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, abortWhenCancelled);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<CancelToken*>(t.cancel));
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  }
}

constexpr std::string_view kNotFoundWords = "HTTP 404";

std::string statusWords(long status, const Transfer& t, const HttpTarget& target) {
  std::string out = status == 404 ? std::string(kNotFoundWords) : "HTTP " + std::to_string(status);
  if (const std::string detail = errorDetail(t.errorBody); !detail.empty()) out += " (" + detail + ")";
  if (status == 403 && target.s3)
    out += target.s3->anonymous() ? "; the request was unsigned: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
                                  : "; signed with " + target.s3->describe();
  if (status == 404) out += target.s3 ? "; no such bucket or key" : "; no such file on the server";
  if (status >= 300 && status < 400 && target.s3)
    out += "; signed requests follow no redirect: set AWS_REGION (or AWS_ENDPOINT_URL) to where the bucket lives";
  return out;
}

// Keys read again after others expired, for every later request signed with the expired ones
// (each would otherwise fail first, then read the AWS files again).
struct RenewedKeys {
  std::mutex mutex;
  std::atomic<bool> any{false};
  std::map<std::string, S3Config> byExpired;  // access key id + session token -> the keys read since
  static std::string keyOf(const S3Config& c) { return c.accessKeyId + '\n' + c.sessionToken; }
};
RenewedKeys& renewedKeys() {
  static auto* keys = new RenewedKeys;  // used by threads still running at exit
  return *keys;
}
// `to` signs with `from`'s keys (its region, endpoint and addressing stay: the URL was made for them).
void takeKeys(S3Config& to, const S3Config& from) {
  to.accessKeyId = from.accessKeyId, to.secretAccessKey = from.secretAccessKey;
  to.sessionToken = from.sessionToken, to.source = from.source;
}

// `c` with the keys read since its own expired, if they did.
void applyRenewedKeys(S3Config& c) {
  RenewedKeys& r = renewedKeys();
  if (!r.any.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  for (int hops = 0; hops < 8; ++hops) {  // renewed more than once during a long run
    const auto it = r.byExpired.find(RenewedKeys::keyOf(c));
    if (it == r.byExpired.end()) return;
    takeKeys(c, it->second);
  }
}

// S3's answers to credentials that were good when the object was opened and have since expired
// (an STS session token lasts 1-12 hours; a training run often longer).
bool credentialsExpired(long status, const std::string& errorBody) {
  if (status != 400 && status != 403) return false;
  for (const char* code : {"<Code>ExpiredToken</Code>", "<Code>TokenRefreshRequired</Code>", "<Code>RequestExpired</Code>"})
    if (errorBody.find(code) != std::string::npos) return true;
  return false;
}

// Runs one request with retries. `first` is where the body starts in the object (range reads);
// every retry of a range read asks only for the bytes not yet received.
void perform(Transfer& t, const HttpTarget& openedTarget, const std::string& what, const std::string& etag,
             const std::function<std::string()>& rangeOfRest) {
  const Settings s = settings();
  // The credentials the object was opened with, until they expire: then once read again from the
  // environment and the AWS files (a job that renews its session token there goes on).
  std::optional<HttpTarget> renewed;
  const HttpTarget* current = &openedTarget;
  if (openedTarget.s3 && !openedTarget.s3->anonymous() && renewedKeys().any.load(std::memory_order_acquire)) {
    renewed = openedTarget;
    applyRenewedKeys(*renewed->s3);
    current = &*renewed;
  }
  bool reread = false;
  std::string lastProblem;
  const auto started = std::chrono::steady_clock::now();
  HandleLease handle;
  t.cancel = currentOpenProgress().cancel;  // an open's: this thread's caller installed it
  bool askRest = false;  // the last reply served part of several ranges: ask for the rest at once
  for (int attempt = 0; attempt < s.attempts; ++attempt) {
    if (askRest) {
      askRest = false;
    } else if (attempt > 0) {
      netCounters().retries++;
      sleepBackoff(s, attempt - 1, t.cancel);
    }
    // Named as the user wrote it (the shard, the listing), as the open's own checks name it.
    if (t.cancel) t.cancel->throwIfCancelled(current->display.empty() ? what : current->display);
    t.curl = handle.fresh();
    t.status = 0;
    t.errorBody.clear();
    t.refused.clear();
    t.multiBegun = false;
    t.replyChecked = false;
    t.versionChecked = false;
    const std::size_t gotBefore = t.got;
    const bool ranged = t.dst || t.sink || t.multi;
    if (!ranged) t.text.clear();
    curl_slist* headers = nullptr;
    prepare(t, *current, s, headers, rangeOfRest ? rangeOfRest() : std::string(), etag);
    netCounters().requests++;
    const CURLcode rc = curl_easy_perform(t.curl);
    curl_slist_free_all(headers);
    netCounters().bytes += t.got - gotBefore;
    if (rc == CURLE_ABORTED_BY_CALLBACK && t.cancel && t.cancel->cancelled())
      t.cancel->throwIfCancelled(current->display.empty() ? what : current->display);
    if (t.multiDeclined) return;
    if (t.sinkFailure) std::rethrow_exception(t.sinkFailure);
    if (!t.refused.empty()) throwBadInput(what, t.refused);
    const bool filled = rc == CURLE_WRITE_ERROR && ranged && t.got == t.want;  // a whole-body 200 cut at what was asked
    if ((rc == CURLE_OK || filled) && t.status >= 200 && t.status < 300) {
      // A body that ended before what was asked is resumed, a 200 too (its object shorter than the
      // caller knows it, or its body cut): taken as done, the caller's buffer or cache part kept
      // what was never written. The retry asks from the byte where it ended, which a server that
      // ignores Range refuses plainly.
      if (ranged && t.got < t.want && !t.allowShort) {
        if (t.multi && t.multiAsked > 1 && t.multi->onePart()) {  // the first range alone, or some joined
          t.multiDeclined = true;
          return;
        }
        if (t.multi && t.multi->closed() && t.got > gotBefore) {  // fewer ranges served than asked: not a failure
          t.multiServed = t.multiServed ? std::min(t.multiServed, t.multi->parts()) : t.multi->parts();
          askRest = true;
          --attempt;
          continue;
        }
        lastProblem = "the body ended after " + std::to_string(t.got) + " of " + std::to_string(t.want) + " bytes";
        continue;  // a clean close before the end: resume where it broke
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
      netCounters().nanoseconds += static_cast<std::uint64_t>(ns);
      tlsNetworkSeconds += static_cast<double>(ns) * 1e-9;
      return;
    }
    if (rc == CURLE_OK) {
      if (t.status == 412)
        throwBadInput(what, "the object changed since it was opened (its ETag is no longer " + etag +
                                "): reading on would mix two versions; open the dataset again");
      if (t.status == 416 && t.allowShort) return;  // an empty object
      lastProblem = statusWords(t.status, t, *current);
      if (current->s3 && !current->s3->anonymous() && credentialsExpired(t.status, t.errorBody)) {
        // Not skippable (skip_bad_samples): every later sample would fail the same way.
        const auto expired = [&](const std::string& why) {
          throw Error(ErrorKind::Network, what, lastProblem + "; the credentials expired and " + why +
                                                    ": renew AWS_SESSION_TOKEN (or the profile's) and resume");
        };
        if (reread) expired("those read again are expired too");
        reread = true;
        const S3Config fresh = loadS3Config();
        if (fresh.anonymous()) expired("none are found now");  // unsigned, a private bucket says 403
        S3Config keys = *current->s3;
        const std::string expiredKey = RenewedKeys::keyOf(keys);
        takeKeys(keys, fresh);
        if (RenewedKeys::keyOf(keys) != expiredKey) {
          RenewedKeys& r = renewedKeys();
          std::lock_guard<std::mutex> lock(r.mutex);
          r.byExpired[expiredKey] = keys;
          r.any.store(true, std::memory_order_release);
        }
        renewed = *current;
        renewed->s3 = keys;
        current = &*renewed;
        --attempt;  // not a retry of the same request: another signature
        continue;
      }
      if (retryableStatus(t.status)) continue;
      // Another 5xx (501, 505, 507, a proxy's 52x) is the server's fault, not the sample's, and
      // does not pass on a retry: a Network error at once, which skip_bad_samples does not skip.
      if (t.status >= 500) throw Error(ErrorKind::Network, what, lastProblem);
      throwBadInput(what, lastProblem);
    }
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE)
      throwBadInput(what, std::string("TLS: ") + curl_easy_strerror(rc) +
                              " (the server's certificate does not verify; AWS_CA_BUNDLE=FILE trusts a private CA, "
                              "STOKER_TLS_INSECURE=1 skips the check)");
    // A name that does not resolve is retried like a refused connection (a DNS server that timed
    // out under load); after the budget it is a Network error, which skip_bad_samples does not skip.
    if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT) throwBadInput(what, curl_easy_strerror(rc));
    lastProblem = curl_easy_strerror(rc);
    if (!retryableCurl(rc)) throwBadInput(what, lastProblem);
  }
  throw Error(ErrorKind::Network, what, lastProblem + ", after " + std::to_string(s.attempts) + " attempts (STOKER_HTTP_ATTEMPTS)");
}

}  // namespace

bool isNotFound(const Error& e) {
  return e.kind() == ErrorKind::BadInput && e.reason().rfind(kNotFoundWords, 0) == 0;
}

bool isForbidden(const Error& e) { return e.kind() == ErrorKind::BadInput && e.reason().rfind("HTTP 403", 0) == 0; }

double networkSecondsOnThisThread() { return tlsNetworkSeconds; }

NetCounters& netCounters() {
  static NetCounters counters;
  return counters;
}

namespace {

// The object's size from the last reply to a range read (the first read of an object learns it
// here). A reply that does not say it is refused unless its body ended before what was asked (the
// object ends there): taken as 0, a shard whose server sent no length read as an empty object.
std::uint64_t objectSizeOf(const Transfer& t, const std::string& what, std::uint64_t offset, std::size_t n) {
  const std::uint64_t end = offset + t.got;  // the bytes received, over every attempt
  const bool ended = t.got < n;              // the body ended before what was asked
  unsigned long long a = 0, b = 0, total = 0;
  if (t.status == 206) {
    if (std::sscanf(t.contentRange.c_str(), "bytes %llu-%llu/%llu", &a, &b, &total) == 3) return total;
    if (ended) return end;  // "bytes a-b/*": the object's length unknown to the server, but it ended
    throwBadInput(what, "the server does not say the object's size (Content-Range \"" + t.contentRange + "\")");
  }
  if (t.status == 200) {
    if (t.contentLength >= 0) return static_cast<std::uint64_t>(t.contentLength);
    if (ended) return end;
    throwBadInput(what, "the server ignored the Range request and sent the whole object without its size");
  }
  if (t.status == 416) {
    // "bytes */N": the object's size. A retry after the whole object came (its end was cut) asks
    // from the end, and learns it is there; nothing came at all: the object is empty.
    if (std::sscanf(t.contentRange.c_str(), "bytes */%llu", &total) == 1) {
      if (total == end) return total;
      throwBadInput(what, "HTTP 416: the object has " + std::to_string(total) + " bytes, " + std::to_string(end) +
                              " were read (it changed while it was read?)");
    }
    if (t.got == 0) return 0;
    throwBadInput(what, "HTTP 416 after " + std::to_string(t.got) + " bytes, without the object's size");
  }
  return end;
}

RangeReply getRange(Transfer& t, const HttpTarget& target, std::uint64_t offset, std::size_t n, const std::string& etag,
                    bool allowShort) {
  t.want = n;
  t.rangeAsked = true;
  t.allowShort = allowShort;
  const std::string what = "GET " + target.display + " bytes " + std::to_string(offset) + "-" + std::to_string(offset + n - 1);
  RangeReply reply;
  if (n == 0) return reply;
  t.pinnedEtag = etag;
  perform(t, target, what, etag, [&] {
    t.wantStart = offset + t.got;
    return std::to_string(offset + t.got) + "-" + std::to_string(offset + n - 1);
  });
  if (!etag.empty() && !t.etag.empty() && t.etag != etag)
    throwBadInput(what, "the object changed since it was opened (ETag " + t.etag + ", opened as " + etag + ")");
  reply.etag = t.etag.empty() ? t.pinnedEtag : t.etag;
  reply.got = t.got;
  if (allowShort) reply.objectSize = objectSizeOf(t, what, offset, n);  // only a first read needs it
  return reply;
}

}  // namespace

RangeReply httpGetRange(const HttpTarget& target, std::uint64_t offset, std::size_t n, std::uint8_t* dst, const std::string& etag,
                        bool allowShort) {
  Transfer t;
  t.dst = dst;
  return getRange(t, target, offset, n, etag, allowShort);
}

RangeReply httpGetRange(const HttpTarget& target, std::uint64_t offset, std::size_t n, const ByteSink& sink,
                        const std::string& etag) {
  Transfer t;
  t.sink = &sink;
  return getRange(t, target, offset, n, etag, false);
}

bool httpGetRanges(const HttpTarget& target, std::vector<ByteRange>& ranges, const std::string& etag, int* servedAtMost) {
  Transfer t;
  MultipartRangeReply reply(ranges);
  t.multi = &reply;
  t.rangeAsked = true;
  t.want = reply.wanted();
  t.got = reply.got();
  if (t.got == t.want) return true;
  const std::string what = "GET " + target.display + " " + std::to_string(ranges.size()) + " ranges from byte " +
                           std::to_string(ranges.front().offset);
  perform(t, target, what, etag, [&] {
    std::string asked = rangesStillWanted(ranges);
    t.multiAsked = 1 + static_cast<int>(std::count(asked.begin(), asked.end(), ','));
    return asked;
  });
  if (t.multiDeclined) return false;
  if (!etag.empty() && !t.etag.empty() && t.etag != etag)
    throwBadInput(what, "the object changed since it was opened (ETag " + t.etag + ", opened as " + etag + ")");
  if (servedAtMost) *servedAtMost = t.multiServed;
  return true;
}

std::string httpGetText(const HttpTarget& target, std::size_t maxBytes) {
  Transfer t;
  t.maxText = maxBytes;
  perform(t, target, "GET " + target.display, {}, {});
  return std::move(t.text);
}

}  // namespace stoker
