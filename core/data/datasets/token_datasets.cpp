#include "data/datasets/token_datasets.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <vector>

#include "data/datasets/dataset_spec.h"
#include "net/http_transfer.h"
#include "net/remote_url.h"
#include "util/error.h"
#include "util/monotonic_seconds.h"
#include "util/job_threads.h"

namespace stoker {
namespace {

constexpr std::int64_t kMaxCtx = 1 << 20;

template <typename T>
void widen(const std::uint8_t* src, std::uint64_t n, std::int64_t* dst) {
  for (std::uint64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<std::int64_t>(v);
  }
}

template <typename T>
T readLe(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

TokenWindowDataset::TokenWindowDataset(std::string description, ByteSource file, int tokenBytes,
                                       bool tokenSigned, std::vector<Span> spans, std::int64_t ctx)
    : description_(redactedUrl(description)), file_(std::move(file)), tokenBytes_(tokenBytes), signed_(tokenSigned),
      spans_(std::move(spans)), ctx_(ctx) {
  for (const Span& s : spans_) {
    starts_.push_back(total_);
    total_ += s.tokens;
  }
  inflight_ = readsInFlight(file_.parts(), static_cast<std::uint64_t>(ctx_ + 1) * static_cast<std::uint64_t>(tokenBytes_));
  samples_ = total_ > static_cast<std::uint64_t>(ctx_) ? static_cast<std::int64_t>((total_ - 1) / static_cast<std::uint64_t>(ctx_)) : 0;
  if (total_ == 0) throwBadInput(description_, "holds no tokens");
  if (samples_ == 0)
    throwBadInput(description_, std::to_string(total_) + " tokens: too few for one sample of ctx + 1 = " + std::to_string(ctx_ + 1) +
                                    " tokens (lower ctx=)");
  specs_ = {FieldSpec{"input", c10::ScalarType::Long, {ctx_}, ctx_ * 8}, FieldSpec{"target", c10::ScalarType::Long, {ctx_}, ctx_ * 8}};
}

void TokenWindowDataset::widenTokens(const std::uint8_t* src, std::uint64_t n, std::int64_t* out) const {
  switch (tokenBytes_ * (signed_ ? -1 : 1)) {
    case 1: widen<std::uint8_t>(src, n, out); break;
    case -1: widen<std::int8_t>(src, n, out); break;
    case 2: widen<std::uint16_t>(src, n, out); break;
    case -2: widen<std::int16_t>(src, n, out); break;
    case 4: widen<std::uint32_t>(src, n, out); break;
    case -4: widen<std::int32_t>(src, n, out); break;
    default: widen<std::int64_t>(src, n, out); break;
  }
}

// Window `index` as the pieces of the file that hold it: the span holding its first token, then
// the following ones (Megatron windows cross documents). onPiece(byte offset, tokens, tokens before).
template <class OnPiece>
void TokenWindowDataset::forEachPiece(std::int64_t index, OnPiece&& onPiece) const {
  std::uint64_t pos = static_cast<std::uint64_t>(index) * static_cast<std::uint64_t>(ctx_);
  const std::uint64_t need = static_cast<std::uint64_t>(ctx_) + 1;
  std::size_t s = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
  for (std::uint64_t done = 0; done < need; ++s) {
    const std::uint64_t skip = pos - starts_[s];
    const std::uint64_t take = std::min(need - done, spans_[s].tokens - skip);
    onPiece(spans_[s].offset + skip * static_cast<std::uint64_t>(tokenBytes_), take, done);
    done += take;
    pos += take;
  }
}

void TokenWindowDataset::readItem(std::int64_t index, std::uint8_t* const* dst) const {
  if (index < 0 || index >= samples_)
    throwBadInput("sample " + std::to_string(index), "out of range for " + std::to_string(samples_) + " samples");
  thread_local std::vector<std::int64_t> window;
  window.resize(static_cast<std::size_t>(ctx_) + 1);
  forEachPiece(index, [&](std::uint64_t at, std::uint64_t take, std::uint64_t done) {
    // Mapped (local, or a remote part in cache_dir): read in place; else one range read.
    thread_local ByteVector fetched;  // filled by the network or copied into: never zeroed
    const std::uint8_t* src = file_.mapped() ? file_.mapped() + at
                                             : file_.bytesAt(at, static_cast<std::size_t>(take) * static_cast<std::size_t>(tokenBytes_), fetched);
    widenTokens(src, take, window.data() + done);
  });
  const std::size_t bytes = static_cast<std::size_t>(ctx_) * 8;
  std::memcpy(dst[0], window.data(), bytes);
  std::memcpy(dst[1], window.data() + 1, bytes);
}

// Remote windows are latency-bound: a batch's are fetched by readsInFlight threads at once (as
// many windows as max_inflight_parts parts of part_size hold, at most 64), the worker's kept
// helpers (util/job_threads): started once, not 64 thread starts for every batch.
void TokenWindowDataset::readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const {
  if (parallelReads() <= 1 || count <= 1) return Dataset::readBatch(indices, count, dst);
  if (file_.servesRanges() && readBatchByRanges(indices, count, dst)) return;
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(count));
  forEachFetchedInOrder(
      count, inflight_,
      [&](std::int64_t i) {
        std::uint8_t* slot[2] = {dst[0] + i * specs_[0].sampleBytes, dst[1] + i * specs_[1].sampleBytes};
        try {
          readItem(indices[i], slot);
        } catch (...) {
          failed[static_cast<std::size_t>(i)] = std::current_exception();  // thrown at its sample, in order
        }
      },
      [&](std::int64_t i) {
        if (!failed[static_cast<std::size_t>(i)]) return;
        try {
          std::rethrow_exception(failed[static_cast<std::size_t>(i)]);
        } catch (...) {
          rethrowForSample(indices[i]);
        }
      });
}

// Over HTTP(S) the windows of a batch go as the ranges of a few requests (RemoteObject::readRanges):
// sorted by their place in the file, windows that touch (neighbours share a token) joined into one
// range, at most as many ranges as the server serves in a reply (rangesPerRequest(), 64, or fewer once
// it served fewer) and about a part's bytes a request, inflight_ requests
// at once. The bytes land in one scratch buffer, then each window is widened from it. False when
// the server declines several ranges at once (or an index is out of range): read one request each.
bool TokenWindowDataset::readBatchByRanges(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const {
  struct Piece {
    std::uint64_t at = 0, bytes = 0;  // in the file
    std::int64_t sample = 0;          // its place in the batch
    std::uint64_t token = 0;          // its first token's place in the window
    std::size_t range = 0, scratch = 0;
  };
  std::vector<Piece> pieces;
  pieces.reserve(static_cast<std::size_t>(count));
  const std::uint64_t need = static_cast<std::uint64_t>(ctx_) + 1;
  for (std::int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || indices[i] >= samples_) return false;  // readItem says which
    forEachPiece(indices[i], [&](std::uint64_t at, std::uint64_t take, std::uint64_t done) {
      pieces.push_back({at, take * static_cast<std::uint64_t>(tokenBytes_), i, done});
    });
  }
  std::vector<std::size_t> order(pieces.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pieces[a].at < pieces[b].at; });
  std::vector<ByteRange> ranges;
  std::vector<std::size_t> rangeStart;  // each range's place in the scratch buffer
  std::size_t total = 0;
  for (const std::size_t k : order) {
    Piece& p = pieces[k];
    if (!ranges.empty() && p.at <= ranges.back().offset + ranges.back().n) {
      ByteRange& r = ranges.back();
      r.n = static_cast<std::size_t>(std::max<std::uint64_t>(r.offset + r.n, p.at + p.bytes) - r.offset);
    } else {
      ranges.push_back({p.at, static_cast<std::size_t>(p.bytes), nullptr, 0});
      rangeStart.push_back(total);
    }
    p.range = ranges.size() - 1;
    p.scratch = rangeStart.back() + static_cast<std::size_t>(p.at - ranges.back().offset);
    total = rangeStart.back() + ranges.back().n;
  }
  thread_local ByteVector scratch;  // written by the network before it is read: never zeroed
  scratch.resize(total);
  for (std::size_t r = 0; r < ranges.size(); ++r) ranges[r].dst = scratch.data() + rangeStart[r];
  // Requests: consecutive ranges, at most rangesPerRequest() and about part_size bytes each.
  const std::size_t perRequest = static_cast<std::size_t>(file_.rangesPerRequest());
  const std::uint64_t partBytes = static_cast<std::uint64_t>(std::max<std::int64_t>(file_.parts().partSize, 4096));
  std::vector<std::vector<ByteRange>> requests;
  std::vector<std::size_t> requestOf(ranges.size());
  std::uint64_t bytes = 0;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    if (requests.empty() || requests.back().size() >= perRequest || bytes + ranges[r].n > partBytes) {
      requests.emplace_back();
      bytes = 0;
    }
    requests.back().push_back(ranges[r]);
    bytes += ranges[r].n;
    requestOf[r] = requests.size() - 1;
  }
  std::vector<std::exception_ptr> failed(requests.size());
  std::atomic<bool> declined{false};
  forEachFetchedInOrder(
      static_cast<std::int64_t>(requests.size()), inflight_,
      [&](std::int64_t q) {
        try {
          if (!file_.readRanges(requests[static_cast<std::size_t>(q)])) declined = true;
        } catch (...) {
          failed[static_cast<std::size_t>(q)] = std::current_exception();
        }
      },
      [](std::int64_t) {});
  if (declined) return false;
  // A failed request is thrown at the first sample of the batch it held, as one read each would.
  std::int64_t firstFailed = count;
  std::exception_ptr failure;
  for (const Piece& p : pieces)
    if (const auto& f = failed[requestOf[p.range]]; f && p.sample < firstFailed) {
      firstFailed = p.sample;
      failure = f;
    }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (...) {
      rethrowForSample(indices[firstFailed]);
    }
  }
  thread_local std::vector<std::int64_t> window;
  window.resize(static_cast<std::size_t>(need));
  const std::size_t sampleBytes = static_cast<std::size_t>(ctx_) * 8;
  for (std::size_t k = 0; k < pieces.size();) {
    const std::int64_t i = pieces[k].sample;
    for (; k < pieces.size() && pieces[k].sample == i; ++k)
      widenTokens(scratch.data() + pieces[k].scratch, pieces[k].bytes / static_cast<std::uint64_t>(tokenBytes_), window.data() + pieces[k].token);
    std::memcpy(dst[0] + i * specs_[0].sampleBytes, window.data(), sampleBytes);
    std::memcpy(dst[1] + i * specs_[1].sampleBytes, window.data() + 1, sampleBytes);
  }
  return true;
}

// Remote: the network's time is the "read" stage -- one sample's from the thread's request time
// (no clock call for windows served from cache_dir), a parallel batch's as wall time.
// Mapped windows leave the stages to the loader (their read is a page fault inside the copy).
void TokenWindowDataset::readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                                     const ReadContext& context) const {
  if (!context.stages || !file_.remote()) return readBatch(indices, count, dst);
  if (count == 1) {
    const double before = networkSecondsOnThisThread();
    readBatch(indices, count, dst);
    context.stages->read += networkSecondsOnThisThread() - before;
    return;
  }
  const double t0 = monotonicSeconds();
  readBatch(indices, count, dst);
  context.stages->read += monotonicSeconds() - t0;
}

std::shared_ptr<Dataset> openTokensDataset(const std::string& text, const LoaderOptions& options) {
  const DatasetSpec spec = DatasetSpec::parse(text, "tokens", "dtype,ctx");
  const std::string dtype = spec.options.count("dtype") ? spec.options.at("dtype") : "u16";
  int bytes = 0;
  if (dtype == "u16" || dtype == "uint16") bytes = 2;
  else if (dtype == "u32" || dtype == "uint32") bytes = 4;
  else throwBadInput(text, "dtype must be u16 or u32 (got \"" + dtype + "\")");
  const std::int64_t ctx = spec.integer("ctx", 1024, 1, kMaxCtx);
  ByteSource file = ByteSource::open(spec.path, options);
  if (file.size() % static_cast<std::size_t>(bytes) != 0)
    throwBadInput(spec.path, "size " + std::to_string(file.size()) + " bytes is not a multiple of " + std::to_string(bytes) +
                                 " (dtype " + dtype + "): wrong dtype, or a truncated file");
  std::vector<TokenWindowDataset::Span> spans{{0, file.size() / static_cast<std::size_t>(bytes)}};
  auto out = std::make_shared<TokenWindowDataset>("tokens (" + spec.path + ", " + dtype + ", ctx " + std::to_string(ctx) + ")",
                                                  file, bytes, false, std::move(spans), ctx);
  return out;
}

std::shared_ptr<Dataset> openMegatronDataset(const std::string& text, const LoaderOptions& options) {
  const DatasetSpec spec = DatasetSpec::parse(text, "megatron", "ctx");
  const std::int64_t ctx = spec.integer("ctx", 1024, 1, kMaxCtx);
  const std::string idxPath = spec.path + ".idx", binPath = spec.path + ".bin";
  const ByteSource idxSource = ByteSource::open(idxPath, options);
  const ByteSource bin = ByteSource::open(binPath, options);
  // The index is read through once: mapped, or fetched whole (it is ~12 bytes a sequence).
  const auto idxBytes = idxSource.mapped() ? nullptr : idxSource.readWhole(std::uint64_t(16) << 30);
  const std::uint8_t* p = idxBytes ? idxBytes->data() : idxSource.mapped();
  const std::uint64_t size = idxSource.size();
  static const char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  constexpr std::uint64_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (size < 9 || std::memcmp(p, kMagic, 9) != 0) throwBadInput(idxPath, "not a Megatron index (no MMIDIDX header)");
  if (size < kHeader) throwBadInput(idxPath, "truncated header (" + std::to_string(size) + " bytes)");
  const auto version = readLe<std::uint64_t>(p + 9);
  if (version != 1) throwBadInput(idxPath, "index version " + std::to_string(version) + " (Stoker reads version 1)");
  // Megatron's DType codes: uint8 1, int8 2, int16 3, int32 4, int64 5, float64 6, float32 7, uint16 8.
  const std::uint8_t code = p[17];
  int bytes = 0;
  bool isSigned = true;
  switch (code) {
    case 1: bytes = 1; isSigned = false; break;
    case 2: bytes = 1; break;
    case 3: bytes = 2; break;
    case 4: bytes = 4; break;
    case 5: bytes = 8; break;
    case 8: bytes = 2; isSigned = false; break;
    case 6:
    case 7: throwBadInput(idxPath, "token dtype code " + std::to_string(code) + " is a float: tokens are integers");
    default: throwBadInput(idxPath, "unknown token dtype code " + std::to_string(code));
  }
  const auto sequences = readLe<std::uint64_t>(p + 18), documents = readLe<std::uint64_t>(p + 26);
  // lengths (int32), pointers (int64), document indices (int64): all must fit in the file.
  if (sequences > size || documents > size || kHeader + sequences * 12 + documents * 8 > size)
    throwBadInput(idxPath, std::to_string(sequences) + " sequences and " + std::to_string(documents) +
                               " documents do not fit in " + std::to_string(size) + " bytes (truncated index?)");
  const std::uint8_t* lengths = p + kHeader;
  const std::uint8_t* pointers = lengths + sequences * 4;
  const std::uint8_t* docs = pointers + sequences * 8;
  std::vector<TokenWindowDataset::Span> spans;
  spans.reserve(sequences);
  for (std::uint64_t s = 0; s < sequences; ++s) {
    const auto length = readLe<std::int32_t>(lengths + s * 4);
    const auto pointer = readLe<std::int64_t>(pointers + s * 8);
    if (length < 0 || pointer < 0)
      throwBadInput(idxPath, "sequence " + std::to_string(s) + " has a negative " + (length < 0 ? "length (" : "pointer (") +
                                 std::to_string(length < 0 ? length : pointer) + ")");
    if (static_cast<std::uint64_t>(pointer) + static_cast<std::uint64_t>(length) * static_cast<std::uint64_t>(bytes) > bin.size())
      throwBadInput(idxPath, "sequence " + std::to_string(s) + " (pointer " + std::to_string(pointer) + ", " +
                                 std::to_string(length) + " tokens of " + std::to_string(bytes) + " bytes) runs past the end of " +
                                 binPath + " (" + std::to_string(bin.size()) + " bytes)");
    if (length > 0) spans.push_back({static_cast<std::uint64_t>(pointer), static_cast<std::uint64_t>(length)});
  }
  // Document boundaries: 0 first, non-decreasing, the sequence count last.
  std::uint64_t previous = 0;
  for (std::uint64_t d = 0; d < documents; ++d) {
    const auto at = readLe<std::int64_t>(docs + d * 8);
    if (at < 0 || static_cast<std::uint64_t>(at) < previous || static_cast<std::uint64_t>(at) > sequences || (d == 0 && at != 0))
      throwBadInput(idxPath, "document index " + std::to_string(d) + " = " + std::to_string(at) +
                                 " is out of order or past the " + std::to_string(sequences) + " sequences");
    previous = static_cast<std::uint64_t>(at);
  }
  if (documents > 0 && previous != sequences)
    throwBadInput(idxPath, "the last document index is " + std::to_string(previous) + ", not the sequence count " + std::to_string(sequences));
  auto out = std::make_shared<TokenWindowDataset>("megatron (" + spec.path + ", " + std::to_string(documents ? documents - 1 : 0) +
                                                      " documents, ctx " + std::to_string(ctx) + ")",
                                                  bin, bytes, isSigned, std::move(spans), ctx);
  return out;
}

}  // namespace stoker
