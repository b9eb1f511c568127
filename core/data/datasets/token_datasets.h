// data/datasets/token_datasets: language-model token streams, mapped (never read whole), cut into
// windows of ctx + 1 tokens that overlap by one: sample i is tokens [i*ctx, i*ctx + ctx + 1) of
// the stream, fields `input` = the first ctx and `target` = the last ctx (int64).
//   tokens:FILE.bin[,dtype=u16|u32][,ctx=N]   nanoGPT's flat file (u16 and ctx 1024 by default)
//   megatron:PREFIX[,ctx=N]                    Megatron-LM's indexed dataset: PREFIX.idx (MMIDIDX)
//                                              + PREFIX.bin, documents concatenated in order
// FILE and PREFIX may be s3:// or http(s):// URLs (a Megatron index is then fetched whole).
#pragma once

#include <memory>

#include "data/dataset.h"
#include "data/datasets/byte_source.h"

namespace stoker {

// A stream of tokens made of spans of a file: mapped when local; in S3 each window is a range
// read, and a batch's windows are fetched as many at a time as max_inflight_parts parts of
// part_size hold (readsInFlight); behind HTTP(S), a batch's windows go as the ranges of a few
// requests (up to rangesPerRequest() each) where the server serves several ranges at once.
class TokenWindowDataset : public Dataset {
 public:
  struct Span {
    std::uint64_t offset = 0;  // bytes into the file
    std::uint64_t tokens = 0;
  };
  TokenWindowDataset(std::string description, ByteSource file, int tokenBytes, bool tokenSigned,
                     std::vector<Span> spans, std::int64_t ctx);
  std::string description() const override { return description_; }
  std::int64_t size() const override { return samples_; }
  const std::vector<FieldSpec>& fields() const override { return specs_; }
  void readItem(std::int64_t index, std::uint8_t* const* dst) const override;
  void readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const override;
  // Uncached remote windows are one request each: a batch's go readsInFlight at a time. Cached
  // ones are memory reads once their part is there (the part cache fetches ahead), where threads
  // per batch would only cost.
  int parallelReads() const override { return file_.remote() && !file_.cached() ? inflight_ : 1; }
  bool batchWaitsOnNetwork() const override { return file_.remote() && !file_.cached(); }
  void readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                   const ReadContext& context) const override;
  ResidentAdvice residentAdvice() const override {
    return {true, false, "token windows are read from the mapping; a resident copy would hold every token twice as int64"};
  }
  std::int64_t tokens() const { return total_; }

 private:
  template <class OnPiece>
  void forEachPiece(std::int64_t index, OnPiece&& onPiece) const;  // defined and used in the .cpp
  void widenTokens(const std::uint8_t* src, std::uint64_t n, std::int64_t* out) const;
  bool readBatchByRanges(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const;

  std::string description_;
  ByteSource file_;
  int inflight_ = 1;  // remote: windows of a batch fetched at once (readsInFlight of file_'s parts)
  int tokenBytes_;
  bool signed_;
  std::vector<Span> spans_;
  std::vector<std::uint64_t> starts_;  // stream position of each span
  std::uint64_t total_ = 0;
  std::int64_t ctx_;
  std::int64_t samples_ = 0;
  std::vector<FieldSpec> specs_;
};

std::shared_ptr<Dataset> openTokensDataset(const std::string& spec, const LoaderOptions& options);
std::shared_ptr<Dataset> openMegatronDataset(const std::string& spec, const LoaderOptions& options);

}  // namespace stoker
