#include "data/datasets/web_dataset.h"

#include <archive.h>
#include <archive_entry.h>
#include <xxhash.h>
#include <fnmatch.h>
#include <glob.h>
#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "data/datasets/byte_source.h"
#include "data/datasets/dataset_spec.h"
#include "data/datasets/wds_remote_stream.h"
#include "net/http_transfer.h"
#include "net/part_cache.h"
#include "net/remote_url.h"
#include "net/s3_config.h"
#include "util/atomic_file.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/file_lock.h"
#include "util/file_exists.h"
#include "util/open_progress.h"
#include "util/read_file.h"
#include "util/run_jobs.h"

namespace stoker {
namespace {

// A rank's shard list as an entry of the scan exchange (shard -1): the count, and a hash of the URLs.
ScannedShard shardListEntry(const std::vector<std::string>& shards) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const std::string& url : shards) XXH3_64bits_update(state, url.c_str(), url.size() + 1);  // the NULs part them
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state)));
  XXH3_freeState(state);
  return ScannedShard{-1, std::string("shard list ") + hex, shards.size(), {}, {}};
}

// `ext` comes lower-cased from the scan.
bool isImageExtension(const std::string& ext) {
  for (const char* e : {"jpg", "jpeg", "png", "webp", "tif", "tiff", "bmp"})
    if (ext == e) return true;
  return false;
}

// webdataset's base_plus_ext: the key is the path up to the first dot of the file name.
bool splitKey(const std::string& path, std::string& key, std::string& ext) {
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size()) return false;
  key = path.substr(0, dot);
  ext = path.substr(dot + 1);
  return true;
}

// webdataset's int(text): digits, with blanks around; anything else (a word, a NUL, a number past
// int64) would be a wrong label, not a label. Returns the problem, empty when `label` is set.
std::string parseClassNumber(const std::string& raw, std::int64_t& label) {
  std::string_view text = raw;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  long long value = -1;
  const auto [endp, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || endp != text.data() + text.size() || value < 0) {
    std::string shown = raw;
    for (auto& c : shown)
      if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
    return ".cls is not a class number 0 to 2^63-1 (got \"" + shown + "\")";
  }
  label = value;
  return {};
}

constexpr std::uint64_t kMaxClsBytes = 64;
// From an index, a sample's image and .cls are read as one span when at most this much lies between.
constexpr std::uint64_t kSpanSlack = std::uint64_t(64) << 10;
constexpr std::size_t kMaxIndexBytes = std::size_t(256) << 20;
// Remote shards opened from an index (DALI's, or a kept scan) at once: each is a small request.
constexpr std::size_t kIndexedOpensAtOnce = 32;

// Whether an open hands its scans to the other ranks (when a shard is remote): an exchange, no
// index=dali, and ranks that deal shards or split the scans. Every rank of a job decides alike.
bool sharesScans(bool exchange, bool daliIndex, int dealWorld, int splitWorld) {
  return exchange && !daliIndex && (dealWorld > 1 || splitWorld > 1);
}

}  // namespace

ShardDeal ShardDeal::of(const LoaderOptions& o) {
  ShardDeal d;
  d.seed = o.seed;
  d.shuffle = o.shuffle && o.sampler_type != SamplerType::Sequential;
  if (o.sampler_type == SamplerType::Distributed) {
    d.rank = o.shard_rank;
    d.world = o.shard_world_size;
  }
  return d;
}

std::string daliIndexPathOf(const std::string& shard, const std::string& dir) {
  const std::size_t slash = shard.rfind('/');
  const std::size_t start = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = shard.find('.', start + 1);
  const std::string beside = (dot == std::string::npos ? shard : shard.substr(0, dot)) + ".idx";
  if (dir.empty()) return beside;
  return (dir.back() == '/' ? dir : dir + "/") + beside.substr(start);
}

namespace {

// DALI's naming (the name up to the first dot after the last '/') gives
// "imagenet.train-000000.tar" and "imagenet.train-000001.tar" one index, "imagenet.idx", as it
// gives train/a.tar and val/a.tar one under index=dali:DIR: written, each shard's overwrote the
// last's; read, every shard took one shard's index (the bytes of another shard, or its first M
// samples only). Two shards sharing an index path are refused, naming both.
void requireAnIndexEach(const std::vector<std::string>& shards, const std::string& dir) {
  std::unordered_map<std::string, const std::string*> shardOfIndex;
  for (const std::string& shard : shards) {
    const std::string index = daliIndexPathOf(shard, dir);
    const auto [it, added] = shardOfIndex.emplace(index, &shard);
    if (!added)
      throwBadInput(index, "would be the DALI index of both " + *it->second + " and " + shard +
                               " (DALI names an index by the shard's name up to its first dot): rename the shards, or "
                               "index them in separate folders");
  }
}

// The shards in the order epoch `epoch` reads them, all ranks' (shard k to rank k % world).
std::vector<std::int64_t> shardOrderOf(std::size_t shards, const ShardDeal& deal, std::int64_t epoch) {
  std::vector<std::int64_t> order(shards);
  for (std::size_t i = 0; i < shards; ++i) order[i] = static_cast<std::int64_t>(i);
  std::mt19937_64 rng(deal.seed + static_cast<std::uint64_t>(epoch));
  if (deal.shuffle) std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// This rank's shards of such an order, in the order it reads them.
std::vector<std::int64_t> rankShardsOf(const std::vector<std::int64_t>& order, const ShardDeal& deal) {
  std::vector<std::int64_t> mine;
  for (std::size_t k = static_cast<std::size_t>(std::max(deal.rank, 0)); k < order.size();
       k += static_cast<std::size_t>(std::max(deal.world, 1)))
    mine.push_back(order[k]);
  return mine;
}

// A DALI index's text: fetched (a remote shard's, beside it) or read (a local one, or one kept in cache_dir).
std::string indexTextAt(const std::string& path) {
  if (isRemotePath(path)) return httpGetText(targetOf(path), kMaxIndexBytes);
  std::vector<std::uint8_t> bytes;
  readWholeFile(path, kMaxIndexBytes, bytes);
  return std::string(bytes.begin(), bytes.end());
}

constexpr std::size_t kMaxShards = 1000000;
constexpr std::size_t kMaxPatternBytes = std::size_t(256) << 20;  // all the paths together

// FIRST or LAST of a brace range: decimal digits only, within int64 (strtoll would take " +5" and
// clamp 99999999999999999999 to 2^63 - 1 without a word).
bool parseBraceBound(const std::string& text, long long& value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

void expandInto(const std::string& whole, const std::string& pattern, std::vector<std::string>& out, std::size_t& bytes) {
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (out.size() == kMaxShards)
      throwBadInput(whole, "the shard pattern expands to more than " + std::to_string(kMaxShards) + " shards");
    if ((bytes += pattern.size()) > kMaxPatternBytes)
      throwBadInput(whole, "the shard pattern expands to more than " + std::to_string(kMaxPatternBytes >> 20) + " MiB of paths");
    out.push_back(pattern);
    return;
  }
  const std::size_t close = pattern.find('}', open);
  if (close == std::string::npos) throwBadInput(whole, "unbalanced { in the shard pattern");
  const std::string inner = pattern.substr(open + 1, close - open - 1), head = pattern.substr(0, open),
                    tail = pattern.substr(close + 1);
  if (const std::size_t dots = inner.find(".."); dots != std::string::npos) {
    const std::string a = inner.substr(0, dots), b = inner.substr(dots + 2);
    long long lo = 0, hi = 0;
    if (!parseBraceBound(a, lo) || !parseBraceBound(b, hi) || hi < lo || hi - lo >= static_cast<long long>(kMaxShards))
      throwBadInput(whole, "a brace range is {FIRST..LAST} with 0 <= FIRST <= LAST, at most " + std::to_string(kMaxShards) +
                               " values, e.g. {000000..000099}");
    const std::size_t width = a.size();
    for (long long v = lo;; ++v) {  // stops at LAST without stepping past it (LAST may be 2^63 - 1)
      std::string item = std::to_string(v);
      if (item.size() < width) item.insert(0, width - item.size(), '0');
      expandInto(whole, head + item + tail, out, bytes);
      if (v == hi) break;
    }
    return;
  }
  for (std::size_t pos = 0;;) {
    const std::size_t comma = inner.find(',', pos);
    expandInto(whole, head + inner.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos) + tail, out, bytes);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

}  // namespace

std::vector<std::string> expandShardPattern(const std::string& pattern) {
  if (pattern.find('{') != std::string::npos) {
    std::vector<std::string> out;
    std::size_t bytes = 0;
    expandInto(pattern, pattern, out, bytes);
    return out;
  }
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  if (isRemotePath(pattern)) {
    if (pattern.rfind("s3://", 0) != 0)
      throwBadInput(pattern, "an HTTP server has no listing to match a glob against: name the shards with a brace range {000..099}");
    // The listing under the pattern's fixed start, matched whole against the pattern. A bucket of
    // a million objects is a thousand pages, one after another: the opener hears how many are
    // listed (how many there are is not known before the last page).
    const std::string fixed = pattern.substr(0, pattern.find_first_of("*?["));
    OpenProgressMeter meter(currentOpenProgress(), -1, "objects listed");
    std::vector<std::string> out;
    for (const ListedObject& o : listS3(fixed, false, nullptr, [&](std::size_t listed) { meter.tally(listed, fixed); }))
      if (::fnmatch(pattern.c_str(), o.url.c_str(), FNM_PATHNAME) == 0) out.push_back(o.url);
    if (out.empty()) throwBadInput(pattern, "no shard in the bucket's listing matches this glob");
    return out;
  }
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (out.empty()) throwBadInput(pattern, "no shard matches this glob");
  std::sort(out.begin(), out.end());
  return out;
}

WebDataset::WebDataset(const std::string& spec, std::vector<std::string> shards, const std::string& transforms,
                       WebDatasetOptions options)
    : EncodedImageDataset("wds (" + spec + ")", transforms), shards_(std::move(shards)), options_(std::move(options)),
      remote_(shards_.size()), opened_(new std::once_flag[shards_.size()]) {
  const PartOptions& parts = options_.parts;
  for (const std::string& shard : shards_) isRemote_.push_back(isRemotePath(shard));
  if (options_.keepComponents) components_.resize(shards_.size());
  firstDeal_.assign(shards_.size(), false);
  firstDealOrder_ = rankShardsOf(shardOrderOf(shards_.size(), options_.deal, 0), options_.deal);
  for (std::int64_t shard : firstDealOrder_) firstDeal_[static_cast<std::size_t>(shard)] = true;
  // Remote shards are scanned up to 32 at a time: each scan waits on the network (20 shards 4 at
  // a time took 0.5 s of a 1.5 s run at 50 ms; 16 at a time, two waves of an open and a part each,
  // 0.2 s). The open may use what the loader's workers may have in flight, max_inflight_parts
  // each: one scan holds a part, so max_inflight_parts x workers scans keep the open within the
  // bound the knobs promise (a floor of 8 scans held 8 parts where 1 x 1 asked for one). The
  // samples still come in shard order, and an error names the first shard that failed. Indexes
  // (small) are read 32 at a time.
  if (std::any_of(isRemote_.begin(), isRemote_.end(), [](bool r) { return r; }))
    scanParallel_ = static_cast<int>(std::min<std::size_t>(
        shards_.size(), options_.daliIndex ? kIndexedOpensAtOnce
                                           : static_cast<std::size_t>(std::clamp(parts.maxInflight * std::max(options_.workers, 1), 1, 32))));
  openShards();
  {
    std::lock_guard<std::mutex> lock(blocksMutex_);
    keptAtOpen_ = blocksBytes_;
  }
  shardBegin_.push_back(static_cast<std::int64_t>(samples_.size()));
  if (samples_.empty()) throwBadInput(spec, "the shards hold no samples (<key>.jpg|jpeg|png|webp|tif|tiff|bmp with <key>.cls)");
  // Remote shards: a batch's images are fetched as many at a time as max_inflight_parts parts
  // would hold (readsInFlight; local ones are a pread each, cheaper than a thread).
  if (std::any_of(isRemote_.begin(), isRemote_.end(), [](bool r) { return r; })) {
    std::uint64_t bytes = 0;
    for (const Sample& s : samples_) bytes += s.size + s.clsSize;
    parallelFetches_ = readsInFlight(parts, bytes / samples_.size());
  }
  startReadahead();
}

void WebDataset::openShards() {
  const std::size_t n = shards_.size();
  std::vector<std::vector<Sample>> scanned(n);
  std::vector<std::exception_ptr> failed(n);
  shardSizes_.resize(n);
  peerScanEtags_.assign(n, {});
  peerScanned_.assign(n, false);
  // Sharing scans, this rank first scans only the remote shards of its own first deal (or split).
  const bool anyRemote = std::any_of(isRemote_.begin(), isRemote_.end(), [](bool r) { return r; });
  const bool sharing =
      sharesScans(static_cast<bool>(options_.shareScans), options_.daliIndex, options_.deal.world, options_.split.world) && anyRemote;
  const ScanSplit& split = options_.split;
  auto scansHere = [&](std::size_t s) {
    return options_.deal.world > 1 ? firstDeal_[s] : static_cast<int>(s % static_cast<std::size_t>(split.world)) == split.rank;
  };
  auto peersScan = [&](std::size_t s) { return sharing && isRemote_[s] && !scansHere(s); };
  std::vector<std::string> texts(sharing ? n : 0);
  // Shards are scanned in the order this rank reads them in epoch 0, then the others: the blocks
  // kept for the first epoch within readahead_mb (keeperOf) are then those of the shards it reads
  // first, up to the scans running at once, and what is fetched again comes later in the epoch.
  std::vector<std::int64_t> scanOrder = firstDealOrder_;
  for (std::size_t i = 0; i < n; ++i)
    if (!firstDeal_[i]) scanOrder.push_back(static_cast<std::int64_t>(i));
  // Scanning remote shards downloads them: a large dataset's open takes minutes, so it says how far
  // it is, within each shard too, and stops when cancelled (the caller's OpenProgressScope).
  std::int64_t scansHereCount = 0;
  for (std::size_t i = 0; i < n; ++i) scansHereCount += peersScan(i) ? 0 : 1;
  OpenProgressMeter meter(currentOpenProgress(), scansHereCount, "shards opened");
  if (options_.keptScans && !options_.daliIndex && anyRemote) options_.keptScans->makeFolder();
  openCancel_ = currentOpenProgress().cancel;  // the scans' streams poll it within a shard
  struct Forget {
    const CancelToken*& token;
    ~Forget() { token = nullptr; }  // the opener's, gone once the open returns
  } forget{openCancel_};
  // Opens each shard `skip` lets through with `openOne`, `atOnce` at a time in scanOrder: what fails
  // is kept in `failed` (the first, in shard order, is thrown once every rank has its scans).
  using OpenOne = std::function<void(std::int64_t, OpenProgressMeter::Piece&)>;
  auto openEach = [&](int atOnce, const std::function<bool(std::size_t)>& skip, const OpenOne& openOne) {
    forEachInParallel(static_cast<std::int64_t>(n), atOnce, [&](std::int64_t k) {
      const std::int64_t s = scanOrder[static_cast<std::size_t>(k)];
      const auto i = static_cast<std::size_t>(s);
      if (skip(i)) return;
      try {
        meter.checkCancelled(shards_[i]);
        OpenProgressMeter::Piece piece(meter, shards_[i]);
        openOne(s, piece);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    });
  };
  const OpenOne scanOrIndex = [&](std::int64_t s, OpenProgressMeter::Piece& piece) {
    const auto i = static_cast<std::size_t>(s);
    auto& samples = scanned[i];
    auto& size = shardSizes_[i];
    std::string* text = sharing && isRemote_[i] ? &texts[i] : nullptr;
    if (options_.daliIndex) {
      readIndex(s, samples, size);
      piece.doneWithoutReading();  // the shard is not read
    } else if (isRemote_[i] && options_.keptScans) {
      scanThroughCache(s, samples, size, text, &piece);
    } else {
      scan(s, samples, size, text, &piece);
    }
    piece.done(size);  // what the scan's progress did not count (nothing after doneWithoutReading)
  };
  auto rethrowFirst = [&] {
    for (const auto& f : failed)
      if (f) std::rethrow_exception(f);
  };
  // Shards whose scans were kept are opened first, as many at once as DALI indexes: each is one
  // small request (its size and ETag) and a local file, no part held, so the knobs' bound on scans
  // at once (scanParallel_) would only make them wait: 160 kept shards at 50 ms opened in 0.30 s,
  // against 1.06 s 8 at a time. One that turns out not kept (replaced on the server) is scanned in
  // the pass after.
  std::vector<char> keptOpened(n, 0);  // not vector<bool>: its bits, set from several threads, share words
  if (options_.keptScans && !options_.daliIndex && anyRemote)
    openEach(static_cast<int>(std::min(n, kIndexedOpensAtOnce)), [&](std::size_t i) { return !isRemote_[i] || peersScan(i); },
             [&](std::int64_t s, OpenProgressMeter::Piece& piece) {
               const auto i = static_cast<std::size_t>(s);
               keptOpened[i] = openKeptScan(s, scanned[i], shardSizes_[i], sharing ? &texts[i] : nullptr, &piece);
             });
  openEach(scanParallel_, [&](std::size_t i) { return peersScan(i) || keptOpened[i] || failed[i]; }, scanOrIndex);
  if (sharing) {
    // A rank whose scan failed still takes part (the others wait in the all-gather), then throws.
    std::vector<ScannedShard> mine;
    for (std::size_t i = 0; i < n; ++i)
      if (isRemote_[i] && scansHere(i) && !failed[i]) {
        const auto object = objectOf(static_cast<std::int64_t>(i));
        mine.push_back(ScannedShard{static_cast<std::int64_t>(i), shards_[i], shardSizes_[i], object->etag(), std::move(texts[i])});
      }
    // The shard list travels too, as shard -1 (its count, and a hash of its URLs): ranks whose
    // lists differ (an s3:// glob listed while objects came or went) deal other shards under the
    // same numbers, so some are read twice and others never, and take unequal steps (a DDP job
    // hangs at the epoch's end). Every rank sees every list, so every rank refuses.
    const ScannedShard myList = shardListEntry(shards_);
    mine.push_back(myList);
    std::vector<const ScannedShard*> theirs(n, nullptr);
    std::vector<ScannedShard> all;
    try {
      all = options_.shareScans(mine);
    } catch (const std::exception& exchange) {
      // This rank's own scan error comes first (the exchange may have failed because of it,
      // and it is what this rank can mend); the exchange's is kept beside it.
      for (const auto& f : failed)
        if (f) try {
            std::rethrow_exception(f);
          } catch (const Error& e) {
            throw Error(e.kind(), "", std::string(e.what()) + " (then sharing the scans failed too: " + exchange.what() + ")");
          }
      throw;
    }
    rethrowFirst();
    for (const ScannedShard& x : all)
      if (x.shard == myList.shard && (x.url != myList.url || x.size != myList.size))
        throwBadInput("sharing WebDataset scans",
                      "the ranks opened different shard lists (" + std::to_string(n) + " shards here, " + std::to_string(x.size) +
                          (x.size == n ? " other ones" : "") + " on another rank): each would read other shards under the same "
                          "numbers; every rank must list the same shards (a {000000..000099} pattern pins them; an s3:// glob "
                          "lists the bucket as it is when each rank opens)");
    options_.shareScans = nullptr;  // used once: what it calls (a Python callback) need not outlive the open
    // A shard is known by its number and its URL (lists that differ were refused above; this
    // holds whatever a peer sends).
    for (const ScannedShard& x : all)
      if (x.shard >= 0 && x.shard < static_cast<std::int64_t>(n) && peersScan(static_cast<std::size_t>(x.shard)) &&
          !x.index.empty() && x.url == shards_[static_cast<std::size_t>(x.shard)])
        theirs[static_cast<std::size_t>(x.shard)] = &x;
    // What no rank could index (or sent in a form that does not parse) is scanned here.
    for (std::size_t i = 0; i < n; ++i)
      if (theirs[i] && adoptPeerScan(*theirs[i], scanned[i])) peerScanned_[i] = true;
    keepPeerScans(theirs);
    openEach(scanParallel_, [&](std::size_t i) { return !peersScan(i) || peerScanned_[i]; }, scanOrIndex);
  }
  rethrowFirst();
  meter.finish();
  if (options_.keptScans && !options_.daliIndex && anyRemote) options_.keptScans->trim();
#ifdef __GLIBC__
  // The scans' windows were freed into the allocator's per-thread arenas, which keep them: handed
  // back, they do not stay in the process for its epochs (5,000 photos in 100 shards, 16 in flight,
  // 32 scans: peak 318 MiB instead of 364; 287 MiB with 16 scans and no trim).
  if (scanParallel_ > 1) malloc_trim(0);
#endif
  for (auto& shard : scanned) {
    shardBegin_.push_back(static_cast<std::int64_t>(samples_.size()));
    samples_.insert(samples_.end(), std::make_move_iterator(shard.begin()), std::make_move_iterator(shard.end()));
  }
}

// Another rank's scan, checked as a kept index is: it must parse and lie within the object it was
// made of. The object itself is opened when a deal first reads the shard, and must still be that
// one (objectOf).
bool WebDataset::adoptPeerScan(const ScannedShard& scanned, std::vector<Sample>& out) {
  const auto i = static_cast<std::size_t>(scanned.shard);
  try {
    std::vector<Member> members;
    if (parseIndex(scanned.shard, scanned.index, shards_[i] + " (another rank's scan)", members) > scanned.size) return false;
    group(scanned.shard, members, out);
  } catch (const Error&) {
    out.clear();
    if (options_.keepComponents) components_[i].clear();
    return false;
  }
  shardSizes_[i] = scanned.size;
  peerScanEtags_[i] = scanned.etag;
  return true;
}

// The scans taken from other ranks are kept as this node's own are (scanThroughCache), named by
// the object's identity as that rank saw it: the node's next open reads them instead of scanning,
// also where each node keeps its own. A shard without an
// ETag is not kept (nothing names its content); a write that fails costs the next open a scan.
void WebDataset::keepPeerScans(const std::vector<const ScannedShard*>& theirs) const {
  if (!options_.keptScans) return;
  std::optional<S3Config> s3;  // read once for the lot, as a listing does
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    if (!theirs[i] || !peerScanned_[i] || theirs[i]->etag.empty()) continue;
    const ScannedShard& x = *theirs[i];
    if (!s3 && RemoteUrl::parse(x.url).isS3()) s3 = loadS3Config();
    const std::string id = cacheIdOf(targetOf(x.url, s3 ? &*s3 : nullptr), x.etag, x.size);
    if (id.empty()) continue;
    const std::string path = keptIndexPath(id);
    try {
      if (!fileExists(path)) options_.keptScans->keep(path, x.index);
    } catch (const Error&) {
      continue;  // a folder that cannot be looked up keeps nothing either
    }
    options_.keptScans->noteLast(shards_[i], id);
  }
}

// Where the scan of the object named `cacheId` is kept (its DALI index).
std::string WebDataset::keptIndexPath(const std::string& cacheId) const { return options_.keptScans->pathOf(cacheId); }

// A rank reads its shards one after another, mixed by the shuffle buffer, so at any time its
// reads fall in the blocks of about `shuffle` consecutive samples. One range request per image
// left a 50 ms server at 0.14-0.46x local (max_inflight_parts 4-64) without a cache: here whole
// blocks of part_size are fetched once, ahead of the reads, and the images served from memory.
// Held: the blocks the shuffle window spans plus max_inflight_parts ahead, at most readahead_mb
// (1 GiB; and never fewer than max_inflight_parts + 2 blocks), and the samples the shuffle buffer
// still needs from blocks dropped (data/datasets/wds_read_plan.h).
void WebDataset::startReadahead() {
  const PartOptions& parts = options_.parts;
  if (parts.cache) return;  // the part cache already keeps whole parts (on disk)
  if (std::none_of(isRemote_.begin(), isRemote_.end(), [](bool r) { return r; })) return;
  const std::uint64_t block = readaheadBlockBytes();
  std::uint64_t blocks = 0, largest = 1;
  for (std::uint64_t size : shardSizes_) {
    blocks += (size + block - 1) / block;
    largest = std::max(largest, std::min(size, block));
  }
  const double samples = static_cast<double>(samples_.size()), shards = static_cast<double>(shards_.size());
  const double window = static_cast<double>(std::max<std::int64_t>(options_.shuffleBuffer, 1));
  const auto spanned = static_cast<std::uint64_t>(std::ceil(window * static_cast<double>(shardBytes()) / samples / static_cast<double>(block)) +
                                                  std::ceil(window * shards / samples) + 1);
  ReadaheadOptions r;
  r.blockBytes = blockBytes_ = block;
  r.ahead = std::max(parts.maxInflight, 2);
  r.threads = std::max(parts.maxInflight, 1);
  const std::uint64_t wanted = std::min(blocks, spanned) + 2 * static_cast<std::uint64_t>(r.ahead);
  r.maxBlocks = static_cast<int>(std::clamp<std::uint64_t>(std::min(wanted, options_.readaheadBytes / largest), r.ahead + 2, 1 << 20));
  const double blocksPerShard = static_cast<double>(blocks) / shards;
  aheadShards_ = static_cast<int>(std::clamp(std::ceil(r.ahead / blocksPerShard), 1.0, static_cast<double>(r.ahead)));
  readahead_ = std::make_unique<RemoteReadahead>(r);
  // What a read of each sample covers: the image, and from an index its .cls when fetch reads both at once.
  std::vector<WdsReadPlan::Span> spans(samples_.size());
  for (std::size_t k = 0; k < samples_.size(); ++k) {
    const Sample& s = samples_[k];
    if (!s.problem.empty()) continue;
    spans[k] = {s.offset, s.offset + s.size};
    if (std::uint64_t lo = 0, hi = 0; s.labelAtRead && readsTogether(s, lo, hi)) spans[k] = {lo, hi};
  }
  plan_ = std::make_unique<WdsReadPlan>(std::move(spans), shardBegin_);
  readahead_->onEvict([this](const RemoteObject& object, std::uint64_t index, const std::uint8_t* bytes, std::size_t n) {
    std::int64_t shard = -1;
    {
      std::lock_guard<std::mutex> lock(objectsMutex_);
      if (const auto found = shardOfObject_.find(&object); found != shardOfObject_.end()) shard = found->second;
    }
    if (shard >= 0) plan_->keepFrom(shard, index * blockBytes_, bytes, n);
  });
}

struct WebDataset::Member {
  std::string key, ext;  // ext lower-cased, as webdataset's group_by_keys(lcase=True)
  std::string name;      // the member's path in the tar
  std::int64_t header = -1, size = 0;  // header: from the scan (-1 from an index)
  std::uint64_t offset = 0;            // the data's first byte
  bool placed = false;                 // offset is known and inside the shard
  bool hasText = false;
  std::string text;     // .cls content, when read
  std::string problem;  // why this member cannot serve, if it cannot
};

// One pass over a shard's headers. A member's data starts where the next member's headers (pax
// ones included) begin, less its padded size: libarchive gives header positions, not data ones.
// A shard that does not parse as a tar is refused whole; a sample that does not make sense (no
// image, no or a bad .cls, a member twice) is refused at once, or kept as a bad sample that fails
// when read -- so skip_bad_samples skips and counts it like an undecodable image.
void WebDataset::scan(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText,
                      OpenProgressMeter::Piece* progress) {
  const std::string& path = shards_[static_cast<std::size_t>(shard)];
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  archive_read_support_format_tar(a.get());
  std::int64_t fileSize = 0;
  std::vector<std::pair<std::uint64_t, ByteVector>> kept;  // blocks the first epoch may read (keepScannedBlocks)
  std::unique_ptr<WdsRemoteStream> stream;
  if (isRemotePath(path)) {
    PartOptions window = options_.parts;
    window.maxInflight = std::max(1, window.maxInflight * std::max(options_.workers, 1) / scanParallel_);
    // Without a cache, the open's request brings the first part too: one round trip less per shard
    // (a shard of one part is scanned in one request). With one, the first part goes through it.
    ByteVector head;
    const auto object = objectOf(shard, window.cache ? nullptr : &head, static_cast<std::size_t>(WdsRemoteStream::blockBytesFor(window)));
    stream = std::make_unique<WdsRemoteStream>(*object, window, std::move(head), keeperOf(shard, kept), openCancel_);
    fileSize = static_cast<std::int64_t>(object->size());
    stream->attach(a.get());
    if (archive_read_open1(a.get()) != ARCHIVE_OK) {
      stream->rethrowIfFailed();
      throwBadInput(path, std::string("not a readable tar: ") + archive_error_string(a.get()));
    }
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(ErrorKind::Io, path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throwBadInput(path, "not a regular file");
    fileSize = st.st_size;
    if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
      throwBadInput(path, std::string("not a readable tar: ") + archive_error_string(a.get()));
  }
  if (progress) progress->sized(static_cast<std::uint64_t>(fileSize));
  std::vector<Member> members;
  archive_entry* entry = nullptr;
  int rc;
  while ((rc = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    Member m;
    m.header = archive_read_header_position(a.get());
    if (progress) progress->reached(static_cast<std::uint64_t>(m.header));  // a multi-GB shard moves as it is read
    m.size = archive_entry_size(entry);
    if (archive_entry_filetype(entry) != AE_IFREG) {
      members.push_back(m);  // a folder: its position still ends the previous member
      continue;
    }
    const char* name = archive_entry_pathname(entry);
    if (!name || !splitKey(name, m.key, m.ext)) {
      members.push_back(m);
      continue;
    }
    m.name = name;
    for (auto& c : m.ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (archive_entry_sparse_count(entry) > 0)
      m.problem = "." + m.ext + " is a sparse tar member (tar -S): its bytes are not stored in one piece; write the shard without -S";
    if (m.ext == "cls" && m.size <= static_cast<std::int64_t>(kMaxClsBytes)) {
      m.text.resize(static_cast<std::size_t>(m.size));
      if (archive_read_data(a.get(), m.text.data(), m.text.size()) != static_cast<la_ssize_t>(m.text.size())) {
        if (stream) stream->rethrowIfFailed();
        throwBadInput(path + ": " + name, std::string("truncated member: ") + archive_error_string(a.get()));
      }
      m.hasText = true;
    } else if (m.ext == "cls") {
      m.problem = "a .cls of " + std::to_string(m.size) + " bytes is not a class number";
    }
    members.push_back(std::move(m));
  }
  if (stream) stream->rethrowIfFailed();  // the network failed, not the tar
  size = static_cast<std::uint64_t>(fileSize);
  if (rc != ARCHIVE_EOF) throwBadInput(path, std::string("corrupt tar: ") + archive_error_string(a.get()));
  const std::int64_t end = archive_read_header_position(a.get());
  const bool wantComponents = indexText || options_.keepComponents;  // else no member's name is copied
  std::vector<Component> components;
  bool indexable = true;  // an index would open the same samples (see below)
  for (std::size_t i = 0; i < members.size(); ++i) {
    Member& m = members[i];
    const std::int64_t next = i + 1 < members.size() ? members[i + 1].header : end;
    const std::int64_t padded = (m.size + 511) / 512 * 512;
    m.placed = next - padded >= m.header + 512 && next <= fileSize;
    if (m.placed) m.offset = static_cast<std::uint64_t>(next - padded);
    if (!m.placed && m.problem.empty() && isImageExtension(m.ext))
      m.problem = "its image's bytes do not lie where the tar headers say (truncated shard?)";
    if (m.key.empty()) continue;
    if (wantComponents && m.placed) components.push_back(Component{m.name.substr(m.key.size() + 1), m.offset, static_cast<std::uint64_t>(m.size), m.name});
    indexable = indexable && m.placed && m.problem.empty() && m.name.find_first_of(" \t\r\n") == std::string::npos;
  }
  group(shard, members, out);
  // A shard whose every member lies in place and whose samples all make sense opens from its index
  // as from this scan; one with a bad sample is scanned again each time, so that it stays one.
  indexable = indexable && std::none_of(out.begin(), out.end(), [](const Sample& x) { return !x.problem.empty(); });
  if (indexText && indexable) *indexText = daliIndexTextOf(components);
  if (options_.keepComponents) components_[static_cast<std::size_t>(shard)] = std::move(components);
  if (stream) {
    stream->finish();
    keepScannedBlocks(shard, std::move(kept), out);
    if (!options_.parts.cache) {
      scanDownloaded_ += size;
      if (firstDeal_[static_cast<std::size_t>(shard)]) firstDealScanned_ += size;
    }
  }
}

// Without a cache, a shard's scan brings (nearly) all of it, and the first epoch fetched it again.
// The blocks the scan passed are held instead (within readahead_mb, like the readahead's blocks
// they become): the first epoch's deal takes them into the readahead (adoptScannedBlocks), or,
// where samples are dealt one by one, the first epoch copies its images from them
// (readScannedBlocks). Only the shards this rank reads in epoch 0 are held: a rank may scan other
// ranks' shards too (all of them, unless the ranks share their scans). The budget goes to the
// blocks in the order the scans pass them: the scans start in the deal's order (openShards), but
// up to 32 run at once, so among those the first to pass a block takes the room.
WdsRemoteStream::KeepFn WebDataset::keeperOf(std::int64_t shard, std::vector<std::pair<std::uint64_t, ByteVector>>& kept) {
  const auto i = static_cast<std::size_t>(shard);
  const std::uint64_t block = readaheadBlockBytes();
  // Blocks of another size are not the readahead's (a part_size under 64 KiB).
  if (options_.parts.cache || options_.keepComponents || !firstDeal_[i] || block != WdsRemoteStream::blockBytesFor(options_.parts))
    return nullptr;
  return [this, &kept](std::uint64_t index, ByteVector& bytes) {
    {
      std::lock_guard<std::mutex> lock(blocksMutex_);
      if (blocksBytes_ + bytes.size() > options_.readaheadBytes) {
        keepRefused_ = true;
        return false;
      }
      blocksBytes_ += bytes.size();  // a scan that fails fails the open: nothing to give back
    }
    kept.emplace_back(index, std::move(bytes));
    return true;
  };
}

void WebDataset::keepScannedBlocks(std::int64_t shard, std::vector<std::pair<std::uint64_t, ByteVector>> kept,
                                   const std::vector<Sample>& samples) {
  if (kept.empty()) return;
  const std::uint64_t block = readaheadBlockBytes();
  ScannedBlocks held;
  for (auto& [index, bytes] : kept) held.emplace(index, ScannedBlock{std::move(bytes), 0});
  // Each block's readable samples: readScannedBlocks lets a block go once they have been read.
  for (const Sample& x : samples) {
    if (!x.problem.empty() || x.size == 0) continue;
    for (std::uint64_t b = x.offset / block; b <= (x.offset + x.size - 1) / block; ++b)
      if (const auto it = held.find(b); it != held.end()) ++it->second.unread;
  }
  // A block no sample reads (tar headers, the end's padding) is never asked for.
  std::uint64_t unused = 0;
  for (auto it = held.begin(); it != held.end();)
    if (it->second.unread == 0) {
      unused += it->second.bytes.size();
      it = held.erase(it);
    } else {
      ++it;
    }
  std::lock_guard<std::mutex> lock(blocksMutex_);
  blocksBytes_ -= unused;
  if (held.empty()) return;
  scannedBlocks_.emplace(shard, std::move(held));
  blocksKept_ = true;
}

std::vector<std::string> WebDataset::openNotes() const {
  const std::uint64_t downloaded = scanDownloaded_.load();
  if (downloaded == 0) return {};
  const std::uint64_t first = firstDealScanned_.load();
  std::string text = "wds: the open downloaded " + formatMiB(static_cast<std::int64_t>(downloaded)) +
                     " of remote shards to read their tar headers (no index=dali, no scan kept by an earlier open); ";
  text += first == 0 ? std::string("none of them is this rank's in the first epoch")
                     : formatMiB(static_cast<std::int64_t>(keptAtOpen_)) + " of the " + formatMiB(static_cast<std::int64_t>(first)) +
                           " this rank reads first are held for its first epoch (readahead_mb=" +
                           std::to_string(options_.readaheadBytes >> 20) + ")" + (keepRefused_ ? ", the rest is fetched again" : "");
  const WdsKeptScans* keptScans = options_.keptScans.get();
  if (!keptScans) {
    text += ". DALI indexes (`stoker dataset index`, then index=dali) or cache_dir spare the download";
  } else if (const std::string problem = keptScans->problem(); !problem.empty()) {
    text += ". The scans could not be kept for the next open (" + problem + "): scan_cache=DIR names another folder";
  } else if (scansNotKept_) {
    text += ". The server gives no ETag, so the scans cannot be kept for the next open: DALI indexes (`stoker dataset "
            "index`, then index=dali) spare the download";
  } else {
    text += ". The scans are kept in " + keptScans->dir() + ": the next open reads them instead (scan_cache=off keeps none)";
  }
  return {text};
}

void WebDataset::adoptScannedBlocks(const std::vector<std::int64_t>& dealtShards) const {
  if (!blocksKept_.load(std::memory_order_acquire)) return;  // the common case, without a lock
  std::lock_guard<std::mutex> lock(blocksMutex_);
  blocksKept_ = false;
  // In the order the rank reads them: the readahead lets the last adopted go first when it needs
  // room, and its own prefetching waits only while every block held is one still to be read.
  for (std::int64_t shard : dealtShards)
    if (const auto held = scannedBlocks_.find(shard); held != scannedBlocks_.end())
      for (auto& [index, block] : held->second) readahead_->adopt(remote_[static_cast<std::size_t>(shard)], index, block.bytes);
  dropScannedBlocks();  // other ranks' shards
}

void WebDataset::dropScannedBlocks() const {
  scannedBlocks_.clear();
  blocksBytes_ = 0;
  blocksKept_ = false;
}

bool WebDataset::readScannedBlocks(std::int64_t shard, std::int64_t epoch, std::uint64_t offset, std::uint8_t* dst,
                                   std::uint64_t n) const {
  if (!blocksKept_.load(std::memory_order_acquire) || n == 0) return false;  // the common case, without a lock
  std::lock_guard<std::mutex> lock(blocksMutex_);
  if (blocksEpoch_ < 0) blocksEpoch_ = epoch;
  if (epoch != blocksEpoch_) {  // a later epoch: what the first did not read, this one fetches as it reads
    dropScannedBlocks();
    return false;
  }
  const auto held = scannedBlocks_.find(shard);
  if (held == scannedBlocks_.end()) return false;
  const std::uint64_t block = readaheadBlockBytes(), first = offset / block, last = (offset + n - 1) / block;
  bool whole = true;  // else a block is not held (the scan skipped it): the caller fetches the sample
  for (std::uint64_t b = first; b <= last && whole; ++b) {
    const auto it = held->second.find(b);
    whole = it != held->second.end() && !(b == last && offset + n > b * block + it->second.bytes.size());
  }
  for (std::uint64_t b = first; b <= last; ++b) {
    const auto it = held->second.find(b);
    if (it == held->second.end()) continue;
    if (whole) {
      const std::uint64_t from = std::max(offset, b * block), to = std::min(offset + n, b * block + it->second.bytes.size());
      std::memcpy(dst + (from - offset), it->second.bytes.data() + (from - b * block), static_cast<std::size_t>(to - from));
    }
    // Each of its samples read, from it or fetched (a repeat, padding a rank's steps, is fetched): let it go.
    if (--it->second.unread <= 0) {
      blocksBytes_ -= it->second.bytes.size();
      held->second.erase(it);
    }
  }
  if (held->second.empty()) scannedBlocks_.erase(held);
  blocksKept_ = !scannedBlocks_.empty();
  return whole;
}

// Remote shards' scans are kept (data/datasets/wds_kept_scans: scan_cache=, cache_dir, or the
// user's cache) as each shard's DALI index, named by the object's identity (URL, ETag, size: a
// shard replaced on the server is scanned again), so a later open -- the next job, another rank of
// the node -- reads a few KiB instead of the shard. Ranks opening together take a lock per shard:
// one scans, the others wait, then read its index. A kept index that does not parse (a damaged
// disk) is scanned again and replaced; one that cannot be written costs nothing but the next
// open's scan.
// Without a part cache, a shard's open request also brings its first block for the scan (scan()),
// which a kept scan would waste: so the URL's note of its last kept scan is read first, and only a
// shard that has one is opened alone (one round trip more when the shard changed since).
void WebDataset::scanThroughCache(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText,
                                  OpenProgressMeter::Piece* progress) {
  WdsKeptScans& keptScans = *options_.keptScans;
  const std::string& url = shards_[static_cast<std::size_t>(shard)];
  auto scanAndKeep = [&] {
    std::string text;
    scan(shard, out, size, &text, progress);
    const std::string id = objectOf(shard)->cacheId();
    if (id.empty()) scansNotKept_ = true;  // no ETag: nothing names its content
    if (!id.empty() && !text.empty()) {
      keptScans.keep(keptIndexPath(id), text);
      keptScans.noteLast(url, id);
    }
    if (indexText) *indexText = std::move(text);
  };
  std::optional<std::string> noted;  // what the URL's note says, once read
  if (!options_.parts.cache && (noted = notedKeptScan(url))->empty()) {
    const FileLock lock(keptScans.lastPathOf(url) + ".lock", openCancel_, url);  // ranks opening together: one scans
    if ((noted = notedKeptScan(url))->empty()) return scanAndKeep();
  }
  const std::shared_ptr<const RemoteObject> object = objectOf(shard);
  if (object->cacheId().empty()) return scanAndKeep();
  const std::string path = keptIndexPath(object->cacheId());
  if (readKeptScan(shard, *object, noted ? &*noted : nullptr, out, size, indexText, progress)) return;
  const FileLock lock(path + ".lock", openCancel_, url);
  // Another rank may have scanned it while this one waited (and noted it: the note is read again).
  if (readKeptScan(shard, *object, nullptr, out, size, indexText, progress)) return;
  scanAndKeep();
}

std::string WebDataset::notedKeptScan(const std::string& url) const {
  std::string last = options_.keptScans->lastScanOf(url);
  try {
    return !last.empty() && fileExists(keptIndexPath(last)) ? last : std::string();
  } catch (const Error&) {
    return {};  // a folder that cannot be looked up (EACCES): scanned, and the keeping says why
  }
}

bool WebDataset::readKeptScan(std::int64_t shard, const RemoteObject& object, const std::string* noted, std::vector<Sample>& out,
                              std::uint64_t& size, std::string* indexText, OpenProgressMeter::Piece* progress) {
  const std::string path = keptIndexPath(object.cacheId());
  try {
    if (object.cacheId().empty() || !fileExists(path)) return false;
    std::vector<Member> members;
    std::string text = indexTextAt(path);
    if (parseIndex(shard, text, path, members) > object.size()) return false;
    group(shard, members, out);
    size = object.size();
    WdsKeptScans::touch(path);  // used now: the last the user's cache lets go
    // A scan kept before the notes were (under cache_dir) is noted now, so the next open takes it
    // among the kept ones (openShards' first pass).
    const std::string& url = shards_[static_cast<std::size_t>(shard)];
    if ((noted ? *noted : options_.keptScans->lastScanOf(url)) != object.cacheId()) options_.keptScans->noteLast(url, object.cacheId());
    if (progress) progress->doneWithoutReading();  // the shard is not read: its bytes are no download
    if (indexText) *indexText = std::move(text);
    return true;
  } catch (const Error&) {
    out.clear();
    if (options_.keepComponents) components_[static_cast<std::size_t>(shard)].clear();
    return false;
  }
}

bool WebDataset::openKeptScan(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size, std::string* indexText,
                              OpenProgressMeter::Piece* progress) {
  const std::string noted = notedKeptScan(shards_[static_cast<std::size_t>(shard)]);
  if (noted.empty()) return false;
  const std::shared_ptr<const RemoteObject> object = objectOf(shard);
  return readKeptScan(shard, *object, &noted, out, size, indexText, progress);
}

// A DALI index (tools/wds2idx.py): "v1.1 N" or "v1.2 N", then one line per sample of its members,
// "ext offset size" (v1.1) or "ext offset size name" (v1.2), offsets where the data starts. The
// shard is not read: its members must lie inside it (checked against its size when it is opened),
// and a .cls is read with its image.
void WebDataset::readIndex(std::int64_t shard, std::vector<Sample>& out, std::uint64_t& size) {
  const std::string& shardPath = shards_[static_cast<std::size_t>(shard)];
  const std::string path = daliIndexPathOf(shardPath, options_.indexDir);
  std::vector<Member> members;
  const std::uint64_t indexedEnd = parseIndex(shard, indexTextAt(path), path, members);
  if (!isRemotePath(shardPath)) {  // a local shard is checked now; a remote one when it is opened
    struct stat st {};
    if (::stat(shardPath.c_str(), &st) != 0) throw Error(ErrorKind::Io, shardPath, std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) < indexedEnd)
      throwBadInput(path, "names bytes up to " + std::to_string(indexedEnd) + " of " + shardPath + ", which has " +
                              std::to_string(st.st_size) + ": the index is not this shard's (write it again: stoker dataset index)");
  }
  size = indexedEnd;
  group(shard, members, out);
}

std::uint64_t WebDataset::parseIndex(std::int64_t shard, const std::string& text, const std::string& path,
                                     std::vector<Member>& members) {
  std::istringstream in(text);
  std::string line, version;
  long long count = -1;
  if (!std::getline(in, line)) throwBadInput(path, "is empty (a DALI index starts with \"v1.2 N\")");
  std::istringstream head(line);
  head >> version >> count;
  if (version != "v1.1" && version != "v1.2")
    throwBadInput(path, "is not a DALI WebDataset index of version v1.1 or v1.2 (its first line is \"" + line.substr(0, 40) + "\")");
  head >> std::ws;  // a CRLF file (git's autocrlf) or a trailing space: as the data lines take them
  if (count < 0 || !head.eof())
    throwBadInput(path, "its first line is not \"" + version + " SAMPLES\" (it is \"" + line.substr(0, 40) + "\")");
  const std::size_t fields = version == "v1.1" ? 3 : 4;
  std::uint64_t indexedEnd = 0;
  long long lines = 0;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++lines;
    std::istringstream parts(line);
    std::vector<std::string> words;
    for (std::string w; parts >> w;) words.push_back(w);
    if (words.empty() || words.size() % fields != 0)
      throwBadInput(path + ": line " + std::to_string(lines + 1),
                    "has " + std::to_string(words.size()) + " fields, not groups of " + std::to_string(fields) + " (ext offset size" +
                        (fields == 4 ? " name)" : ")"));
    // Each line is one sample: its key is its first member's (v1.2), or its line (v1.1).
    std::string key = "#" + std::to_string(lines), ext;
    if (fields == 4 && !splitKey(words[3], key, ext)) key = words[3];
    for (std::size_t w = 0; w < words.size(); w += fields) {
      Member m;
      long long offset = -1, bytes = -1;
      if (!parseBraceBound(words[w + 1], offset) || !parseBraceBound(words[w + 2], bytes))
        throwBadInput(path + ": line " + std::to_string(lines + 1), "\"" + words[w + 1] + " " + words[w + 2] + "\" is not an offset and a size");
      m.key = key;
      m.ext = words[w];
      for (auto& c : m.ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      m.name = fields == 4 ? words[w + 3] : key + "." + words[w];
      m.offset = static_cast<std::uint64_t>(offset);
      m.size = static_cast<std::int64_t>(bytes);
      m.placed = true;
      indexedEnd = std::max(indexedEnd, m.offset + static_cast<std::uint64_t>(bytes));
      if (m.ext == "cls" && m.size > static_cast<std::int64_t>(kMaxClsBytes))
        m.problem = "a .cls of " + std::to_string(m.size) + " bytes is not a class number";
      if (options_.keepComponents)
        components_[static_cast<std::size_t>(shard)].push_back(Component{words[w], m.offset, static_cast<std::uint64_t>(m.size), m.name});
      members.push_back(std::move(m));
    }
  }
  if (lines != count)
    throwBadInput(path, "says " + std::to_string(count) + " samples but lists " + std::to_string(lines));
  return indexedEnd;
}

void WebDataset::group(std::int64_t shard, const std::vector<Member>& members, std::vector<Sample>& out) const {
  const std::string& path = shards_[static_cast<std::size_t>(shard)];
  for (std::size_t i = 0; i < members.size();) {
    if (members[i].key.empty()) {
      ++i;
      continue;
    }
    std::size_t j = i;
    const Member* image = nullptr;
    const Member* cls = nullptr;
    std::string problem;
    std::unordered_set<std::string_view> exts;  // a set: a hostile sample of 1M members is not 1M^2 compares
    // Members without a key (a directory, README, macOS tar's AppleDouble "._a.jpg" before each
    // file) are passed over without ending the sample, as webdataset and DALI pass over them: they
    // split "a" into an "a" of .cls alone and an "a" of .jpg alone, each refused.
    for (; j < members.size() && (members[j].key.empty() || members[j].key == members[i].key); ++j) {
      const Member& m = members[j];
      if (m.key.empty()) continue;
      if (!exts.insert(m.ext).second && problem.empty())
        problem = "has the member ." + m.ext + " twice (webdataset refuses a duplicate file name)";
      if (isImageExtension(m.ext) && !image) image = &m;
      if (m.ext == "cls") cls = &m;
    }
    Sample s;
    s.shard = shard;
    s.key = members[i].key;
    if (!image) problem = "has no image member (.jpg, .jpeg, .png, .webp, .tif, .tiff or .bmp)";
    else if (!image->problem.empty()) problem = image->problem;
    if (problem.empty() && !cls) problem = "has no .cls member (the label)";
    if (problem.empty() && !cls->problem.empty()) problem = cls->problem;
    if (problem.empty()) {
      s.size = static_cast<std::uint64_t>(image->size);
      s.offset = image->offset;
      if (cls->hasText) {
        problem = parseClassNumber(cls->text, s.label);
      } else {
        s.labelAtRead = true;
        s.clsOffset = cls->offset;
        s.clsSize = static_cast<std::uint64_t>(cls->size);
      }
    }
    if (!problem.empty()) {
      if (!options_.keepBadSamples) throwBadInput(path + ": sample \"" + members[i].key + "\"", problem);
      s = Sample{};
      s.shard = shard;
      s.key = members[i].key;
      s.problem = problem;
    }
    out.push_back(std::move(s));
    i = j;
  }
}

void WebDataset::fetch(std::int64_t index, std::int64_t epoch, std::vector<std::uint8_t>& bytes, std::int64_t& label,
                       std::string& name) const {
  const Sample& s = samples_[static_cast<std::size_t>(index)];
  name = shards_[static_cast<std::size_t>(s.shard)] + ": " + s.key;
  if (!s.problem.empty()) throwBadInput(shards_[static_cast<std::size_t>(s.shard)] + ": sample \"" + s.key + "\"", s.problem);
  label = s.label;
  if (!s.labelAtRead) {
    bytes.resize(static_cast<std::size_t>(s.size));
    readSpan(s, epoch, s.offset, bytes.data(), s.size);
    if (plan_) plan_->read(index, epoch);
    return;
  }
  // From an index: the .cls is read with the image -- one read of the span holding both, as tar
  // writers put a sample's members next to each other (two reads when they lie apart).
  std::uint64_t first = 0, last = 0;
  std::string text(static_cast<std::size_t>(s.clsSize), '\0');
  if (readsTogether(s, first, last)) {
    bytes.resize(static_cast<std::size_t>(last - first));
    readSpan(s, epoch, first, bytes.data(), last - first);
    std::memcpy(text.data(), bytes.data() + (s.clsOffset - first), text.size());
    std::memmove(bytes.data(), bytes.data() + (s.offset - first), static_cast<std::size_t>(s.size));
    bytes.resize(static_cast<std::size_t>(s.size));
  } else {
    bytes.resize(static_cast<std::size_t>(s.size));
    readSpan(s, epoch, s.offset, bytes.data(), s.size);
    readSpan(s, epoch, s.clsOffset, reinterpret_cast<std::uint8_t*>(text.data()), s.clsSize);
  }
  if (plan_) plan_->read(index, epoch);
  if (std::string problem = parseClassNumber(text, label); !problem.empty())
    throwBadInput(shards_[static_cast<std::size_t>(s.shard)] + ": sample \"" + s.key + "\"", problem);
}

bool WebDataset::readsTogether(const Sample& s, std::uint64_t& lo, std::uint64_t& hi) {
  lo = std::min(s.offset, s.clsOffset);
  hi = std::max(s.offset + s.size, s.clsOffset + s.clsSize);
  return hi - lo <= s.size + s.clsSize + kSpanSlack;
}

void WebDataset::readSpan(const Sample& s, std::int64_t epoch, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const {
  // A plan dealing single samples (stoker feed's) reads across every shard at random: there a
  // block would bring one image and many another rank reads, so each image is its own request --
  // except in the first epoch, from the blocks this rank's scan brought.
  if (const auto remote = objectOf(s.shard)) {
    const std::int64_t index = &s - samples_.data();
    if (readahead_ && ownOrderDrawn_.load(std::memory_order_relaxed)) {
      if (!plan_->readKept(index, offset, dst, n)) readRemote(s, offset, dst, n);
    } else if (!readScannedBlocks(s.shard, epoch, offset, dst, n)) {
      remote->read(offset, dst, static_cast<std::size_t>(n), options_.parts);
    }
    return;
  }
  // Opened per read, not kept: datasets of thousands of shards stay under the fd limit, and an
  // open + close costs microseconds next to a decode.
  const std::string name = shards_[static_cast<std::size_t>(s.shard)] + ": " + s.key;
  const std::size_t got = readFileRange(shards_[static_cast<std::size_t>(s.shard)], offset, dst, static_cast<std::size_t>(n), name);
  if (got != n) throwBadInput(name, "the shard ended inside this sample (truncated since it was opened?)");
}

std::shared_ptr<const RemoteObject> WebDataset::objectOf(std::int64_t shard, ByteVector* takeHead,
                                                         std::size_t headBytes) const {
  const auto i = static_cast<std::size_t>(shard);
  if (!isRemote_[i]) return nullptr;
  std::call_once(opened_[i], [&] {
    auto object = RemoteObject::open(shards_[i], takeHead ? headBytes : 1, nullptr, takeHead);
    if (peerScanned_[i] && (object->size() != shardSizes_[i] || (!peerScanEtags_[i].empty() && object->etag() != peerScanEtags_[i])))
      throwBadInput(shards_[i], "changed on the server since another rank scanned it to open the dataset (" +
                                    std::to_string(shardSizes_[i]) + " bytes" +
                                    (peerScanEtags_[i].empty() ? "" : ", ETag " + peerScanEtags_[i]) + "; now " +
                                    std::to_string(object->size()) + " bytes" +
                                    (peerScanEtags_[i].empty() ? "" : ", ETag " + object->etag()) + "): open the loaders again");
    if (options_.daliIndex && object->size() < shardSizes_[i])
      throwBadInput(daliIndexPathOf(shards_[i], options_.indexDir),
                    "names bytes up to " + std::to_string(shardSizes_[i]) + " of " + shards_[i] + ", which has " +
                        std::to_string(object->size()) + ": the index is not this shard's (write it again: stoker dataset index)");
    {
      std::lock_guard<std::mutex> lock(objectsMutex_);
      shardOfObject_[object.get()] = shard;
    }
    remote_[i] = std::move(object);
  });
  return remote_[i];
}

void WebDataset::readRemote(const Sample& s, std::uint64_t offset, std::uint8_t* dst, std::uint64_t n) const {
  const std::int64_t index = &s - samples_.data();
  readahead_->read(objectOf(s.shard), dst, n, offset, [&] { return plan_->readKept(index, offset, dst, n); });
  // Within a shard the readahead queues the next blocks itself; the deal says which shard follows.
  const std::vector<std::int64_t> next = plan_->shardsAfter(s.shard, aheadShards_, blockBytes_);
  for (std::int64_t shard : next) readahead_->prefetch(objectOf(shard), 0);
}

std::string WebDataset::daliIndexText(std::int64_t shard) const {
  if (!options_.keepComponents) throwBadInput("daliIndexText", "the dataset was not opened with keepComponents");
  return daliIndexTextOf(components_[static_cast<std::size_t>(shard)]);
}

std::string WebDataset::daliIndexTextOf(const std::vector<Component>& components) {
  // Lines as wds2idx writes them: members grouped while their key stays the same.
  std::vector<std::string> lines;
  std::string lastKey;
  for (const Component& c : components) {
    std::string key, ext;
    if (!splitKey(c.name, key, ext)) key = c.name;
    std::string item = c.ext + " " + std::to_string(c.offset) + " " + std::to_string(c.size) + " " + c.name;
    if (lines.empty() || key != lastKey) lines.push_back(std::move(item));
    else lines.back() += " " + item;
    lastKey = key;
  }
  std::string text = "v1.2 " + std::to_string(lines.size()) + "\n";
  for (const auto& line : lines) text += line + "\n";
  return text;
}

std::uint64_t WebDataset::shardBytes() const {
  std::uint64_t n = 0;
  for (std::uint64_t s : shardSizes_) n += s;
  return n;
}

WebDataset::EpochDeal WebDataset::epochDealOf(const LoaderOptions& o, std::int64_t epoch) const {
  EpochDeal d{ShardDeal::of(o), {}, 0};
  d.shardOrder = shardOrderOf(shards_.size(), d.deal, epoch);
  const int rank = d.deal.rank, world = d.deal.world;
  if (d.shardOrder.size() < static_cast<std::size_t>(world))
    throwBadInput("shard_world_size " + std::to_string(world),
                  std::to_string(d.shardOrder.size()) + " WebDataset shards cannot feed " + std::to_string(world) +
                      " ranks: each rank reads whole shards (split the data into at least as many shards as ranks)");
  // Every rank must take the same number of steps, or a DDP job hangs in its last all-reduce: as
  // DistributedSampler does, drop_last trims every rank to the smallest rank's count this epoch,
  // otherwise every rank is padded to the largest by repeating its own first samples.
  std::vector<std::int64_t> samplesOf(static_cast<std::size_t>(world), 0);  // shard k goes to rank k % world
  for (std::size_t k = 0; k < d.shardOrder.size(); ++k)
    samplesOf[k % static_cast<std::size_t>(world)] +=
        shardBegin_[static_cast<std::size_t>(d.shardOrder[k]) + 1] - shardBegin_[static_cast<std::size_t>(d.shardOrder[k])];
  const auto [fewest, most] = std::minmax_element(samplesOf.begin(), samplesOf.end());
  d.perRank = o.drop_last ? *fewest : *most;
  // With drop_last, a rank dealt only empty shards trims every rank's epoch to nothing: each would
  // run empty epochs without a word, so every rank refuses it.
  if (o.drop_last && *fewest == 0 && *most > 0)
    throwBadInput("rank " + std::to_string(fewest - samplesOf.begin()),
                  "its WebDataset shards hold no samples in epoch " + std::to_string(epoch) + ", while other ranks' hold up to " +
                      std::to_string(*most) + ": drop_last would trim every rank's epoch to nothing");
  if (samplesOf[static_cast<std::size_t>(std::max(rank, 0))] == 0 && d.perRank > 0)
    throwBadInput("rank " + std::to_string(rank), "its WebDataset shards hold no samples in epoch " + std::to_string(epoch) +
                                                       ", while other ranks' hold " + std::to_string(d.perRank));
  return d;
}

std::optional<std::int64_t> WebDataset::ownEpochLength(const LoaderOptions& o, std::int64_t epoch) const {
  return epochDealOf(o, epoch).perRank;
}

void WebDataset::ownEpochRest(std::int64_t epoch, const std::int64_t* indices, std::int64_t count) const {
  if (plan_) plan_->rest(epoch, indices, count);
}

std::optional<std::vector<std::int64_t>> WebDataset::ownEpochOrder(const LoaderOptions& o, std::int64_t epoch) const {
  const EpochDeal epochDeal = epochDealOf(o, epoch);
  const ShardDeal& deal = epochDeal.deal;
  const int rank = deal.rank;
  auto equalised = [&](std::vector<std::int64_t> v) {  // epochDealOf refused an empty rank among others
    const std::size_t own = v.size(), want = static_cast<std::size_t>(epochDeal.perRank);
    if (want < own) v.resize(want);
    for (std::size_t i = 0; v.size() < want; ++i) v.push_back(v[i % own]);
    return v;
  };
  const std::vector<std::int64_t> dealt = rankShardsOf(epochDeal.shardOrder, deal);
  std::vector<std::int64_t> order;
  for (std::int64_t shard : dealt)
    for (std::int64_t i = shardBegin_[static_cast<std::size_t>(shard)]; i < shardBegin_[static_cast<std::size_t>(shard) + 1]; ++i)
      order.push_back(i);
  std::vector<std::int64_t> nextShard;  // the readahead follows this rank's deal from shard to shard
  if (readahead_) {
    nextShard.assign(shards_.size(), -1);
    for (std::size_t k = 0; k + 1 < dealt.size(); ++k) nextShard[static_cast<std::size_t>(dealt[k])] = dealt[k + 1];
  }
  // From an index or another rank's scan, a shard is opened when first dealt: this rank's, 32 at a
  // time, here rather than on a worker's first read (a shard that changed since is refused now).
  {
    std::vector<std::int64_t> mine;
    for (std::int64_t shard : dealt)
      if (isRemotePath(shards_[static_cast<std::size_t>(shard)]) && (options_.daliIndex || peerScanned_[static_cast<std::size_t>(shard)]))
        mine.push_back(shard);
    std::vector<std::exception_ptr> failed(mine.size());
    forEachInParallel(static_cast<std::int64_t>(mine.size()), scanParallel_, [&](std::int64_t k) {
      try {
        objectOf(mine[static_cast<std::size_t>(k)]);
      } catch (...) {
        failed[static_cast<std::size_t>(k)] = std::current_exception();
      }
    });
    for (const auto& f : failed)
      if (f) std::rethrow_exception(f);
  }
  const std::int64_t shuffleBuffer = options_.shuffleBuffer;
  auto planned = [&](std::vector<std::int64_t> v) {
    if (readahead_) {
      plan_->planned(v, epoch, std::move(nextShard));
      ownOrderDrawn_ = true;
      adoptScannedBlocks(dealt);
    }
    return v;
  };
  if (!deal.shuffle || shuffleBuffer <= 1) return planned(equalised(std::move(order)));
  // webdataset's shuffle(N): keep a buffer of N, emit a random one, refill from the stream.
  std::mt19937_64 mix(o.seed * 1000003u + static_cast<std::uint64_t>(epoch) * 7919u + static_cast<std::uint64_t>(rank));
  std::vector<std::int64_t> buffer, out;
  out.reserve(order.size());
  for (std::int64_t s : order) {
    if (static_cast<std::int64_t>(buffer.size()) < shuffleBuffer) {
      buffer.push_back(s);
      continue;
    }
    const std::size_t pick = static_cast<std::size_t>(mix() % buffer.size());
    out.push_back(buffer[pick]);
    buffer[pick] = s;
  }
  std::shuffle(buffer.begin(), buffer.end(), mix);
  out.insert(out.end(), buffer.begin(), buffer.end());
  return planned(equalised(std::move(out)));
}

std::shared_ptr<Dataset> openWebDataset(const std::string& text, const LoaderOptions& options) {
  return openWebDataset(text, options, nullptr);
}

namespace {

WebDatasetOptions webDatasetOptionsOf(const DatasetSpec& spec, const LoaderOptions& options) {
  WebDatasetOptions w;
  w.shuffleBuffer = spec.integer("shuffle", 1000, 0, 1 << 24);
  w.readaheadBytes = static_cast<std::uint64_t>(spec.integer("readahead_mb", 1024, 1, 1 << 20)) << 20;
  if (const auto index = spec.options.find("index"); index != spec.options.end()) {
    const std::string& v = index->second;
    if (v != "dali" && v.rfind("dali:", 0) != 0)
      throwBadInput(spec.text, "index=" + v + ": the one index known is index=dali (DALI's wds2idx files: <shard>.idx beside "
                               "each shard, or index=dali:DIR for a folder of them, local or remote)");
    if (v == "dali:") throwBadInput(spec.text, "index=dali: names no folder (index=dali:DIR, or index=dali for indexes beside the shards)");
    w.daliIndex = true;
    if (v != "dali") w.indexDir = v.substr(5);
  }
  if (options.sampler_type == SamplerType::Weighted || options.sampler_type == SamplerType::RandomWithReplacement)
    throwBadInput("sampler_type " + samplerTypeName(options.sampler_type),
                  "WebDataset shards are read in their own order (random, sequential or distributed)");
  w.keepBadSamples = options.skip_bad_samples;
  w.deal = ShardDeal::of(options);
  w.parts = partOptionsOf(options);
  w.keptScans = WdsKeptScans::of(spec, options.cache_dir);
  w.workers = options.num_workers;
  return w;
}

std::shared_ptr<Dataset> makeWebDataset(const std::string& text, const LoaderOptions& options, ScanExchange shareScans,
                                        ScanSplit split) {
  if (split.world < 1 || split.rank < 0 || split.rank >= split.world)
    throwBadInput(text, "scan split: rank " + std::to_string(split.rank) + " of " + std::to_string(split.world));
  const DatasetSpec spec = DatasetSpec::parse(text, "wds", "shuffle,index,readahead_mb,scan_cache");  // the same on every rank
  // Whether this rank's open joins the others' exchange, decided before anything that may fail on
  // this rank alone (an index= option is index=dali, or no rank opens).
  const bool joins = sharesScans(static_cast<bool>(shareScans), spec.options.count("index") > 0, ShardDeal::of(options).world,
                                 split.world) &&
                     isRemotePath(spec.path);
  WebDatasetOptions w;
  std::vector<std::string> shards;
  try {
    w = webDatasetOptionsOf(spec, options);  // cache_dir: a folder this node may not be able to make
    shards = expandShardPattern(spec.path);  // an s3:// glob: a listing
    if (w.daliIndex) requireAnIndexEach(shards, w.indexDir);
  } catch (...) {
    // The other ranks may have got past these and wait in the exchange for this rank's scans: it
    // takes part with none (they scan its share themselves), then says why it could not open.
    if (joins) {
      try {
        (void)shareScans({});
      } catch (...) {  // this rank's own error is the one to report
      }
    }
    throw;
  }
  w.shareScans = std::move(shareScans);
  w.split = split;
  return std::make_shared<WebDataset>(spec.path, std::move(shards), options.transforms, std::move(w));
}

}  // namespace

std::shared_ptr<Dataset> listWebDataset(const std::string& text, const LoaderOptions& options) {
  return makeWebDataset(text, options, nullptr, {});
}

std::shared_ptr<Dataset> openWebDataset(const std::string& text, const LoaderOptions& options, ScanExchange shareScans,
                                        ScanSplit split) {
  parseImageTransforms(options.transforms);  // to read, an image dataset needs them (checked before the scan)
  return makeWebDataset(text, options, std::move(shareScans), split);
}

std::vector<WrittenIndex> writeDaliIndexes(const std::string& text, const std::string& outDir, const LoaderOptions& options) {
  const DatasetSpec spec = DatasetSpec::parse(text, "wds", "shuffle");
  const std::vector<std::string> shards = expandShardPattern(spec.path);
  for (const auto& shard : shards)
    if (outDir.empty() && isRemotePath(shard))
      throwBadInput(shard, "is remote: name a local folder to write its index into (--out-dir), then open the shards with "
                           "index=dali:DIR (or upload the indexes beside them)");
  requireAnIndexEach(shards, outDir);  // before any is written
  WebDatasetOptions w = webDatasetOptionsOf(spec, options);
  w.keepBadSamples = true;  // an index lists every member, as wds2idx does; reading decides what a bad sample is
  w.keepComponents = true;
  const WebDataset dataset(spec.path, shards, "", std::move(w));
  std::vector<WrittenIndex> out;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string path = daliIndexPathOf(shards[i], outDir);  // what index=dali[:outDir] reads
    const std::string index = dataset.daliIndexText(static_cast<std::int64_t>(i));
    AtomicFile file(path);
    file.write(index.data(), index.size());
    file.commit();
    out.push_back({path, std::stoll(index.substr(5, index.find('\n') - 5))});
  }
  return out;
}

}  // namespace stoker
