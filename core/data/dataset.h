// data/dataset: what the loader reads samples from. A dataset has N samples,
// each made of named fields of fixed dtype and shape (images, labels ...).
// Two ways in: per item (readItem, one sample into one slot per field) and
// per batch (readBatch, many samples into contiguous batch buffers; the
// default loops over readItem). Datasets already in host memory also expose
// their whole fields (hostFields) so resident mode can gather from them
// without reading item by item.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/loader_options.h"
#include "image/byte_expansion.h"

namespace stoker {

struct FieldSpec {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<std::int64_t> sampleShape;  // without the batch dimension
  std::int64_t sampleBytes = 0;
};

// Seconds a dataset spent per stage while reading samples (telemetry's `stages_ms`): read = the
// bytes from storage, decode = JPEG/PNG into pixels, transform = crop, resize, flip, normalise into
// the batch slot. A dataset that does not say leaves them at 0 and the loader counts its whole
// read as collate.
struct StageSeconds {
  double read = 0, decode = 0, transform = 0;
};

// A float32 field the dataset holds as the bytes it was made from, served as byte / divisor
// (Fashion-MNIST's pixels: the file's u8, divided as torchvision's ToTensor divides them, so the
// values are the float field's bit for bit). Gathering a batch from the bytes reads a quarter of
// what the float32 field would: a resident loader on the host does, widening as it copies.
struct ScaledBytes {
  at::Tensor bytes;  // u8 [N, ...], the field's shape
  float divisor = 255.0f;
};

// What a read knows besides the indices.
struct ReadContext {
  std::uint64_t seed = 0;   // generator_seed: transforms draw from (seed, epoch, sample)
  std::int64_t epoch = 0;
  StageSeconds* stages = nullptr;  // where the dataset adds its stage times; may be null
  // Fields the dataset offers as bytes (byteExpansions) are written as bytes, for the device to
  // widen (normalize_on: device), at ByteExpansion::bytesPerSample() a sample.
  bool bytesForDevice = false;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::string description() const = 0;
  virtual std::int64_t size() const = 0;
  virtual const std::vector<FieldSpec>& fields() const = 0;
  // Writes sample `index` to dst[f] (fields()[f].sampleBytes each). May throw;
  // the loader reports the error with the sample index.
  virtual void readItem(std::int64_t index, std::uint8_t* const* dst) const = 0;
  // Writes samples indices[0..count) to dst[f] one after another. Errors name
  // the sample that failed.
  virtual void readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const;
  // readBatch with the epoch, the transform seed and stage timing: what the loader calls. The
  // default ignores them; datasets with random transforms or stages of their own override it.
  virtual void readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                           const ReadContext& context) const;
  // How many samples one readSamples call fetches at once (a remote dataset: max_inflight_parts).
  // Above 1, the loader's workers read a batch in one call rather than sample by sample, so a
  // batch waits on the network about once, not once per sample.
  virtual int parallelReads() const { return 1; }
  // Whether a batch costs a network round trip and little else (uncached remote token windows): the
  // batches in flight, one a worker, then set the pace, and the loader notes when it has few workers.
  virtual bool batchWaitsOnNetwork() const { return false; }
  // Per field, how the dataset can write it as bytes that the device widens into the field
  // (image/byte_expansion): an image field's u8 planes and its ToTensor + Normalize tables. Empty,
  // or nullopt for a field, where it cannot.
  virtual std::vector<std::optional<ByteExpansion>> byteExpansions() const { return {}; }
  // Every field as one contiguous CPU tensor [N, ...] when the dataset is in
  // host memory already; empty when samples are produced on demand.
  virtual std::vector<at::Tensor> hostFields() const { return {}; }
  // Per host field, the bytes it was made from (ScaledBytes); empty, or nullopt for a field, where
  // there are none.
  virtual std::vector<std::optional<ScaledBytes>> scaledFields() const { return {}; }
  // Whether resident mode suits this dataset: `avoid` makes auto stream (with `reason` in the
  // loader's notes); `refuse` makes an explicit loading_mode=resident an error (random transforms
  // drawn per epoch would be frozen at one draw).
  struct ResidentAdvice {
    bool avoid = false, refuse = false;
    std::string reason;
  };
  virtual ResidentAdvice residentAdvice() const { return {}; }
  // The dataset's own order for an epoch (WebDataset reads shard after shard), used instead of
  // the sampler's; nullopt = the sampler decides.
  virtual std::optional<std::vector<std::int64_t>> ownEpochOrder(const LoaderOptions&, std::int64_t) const {
    return std::nullopt;
  }
  // ownEpochOrder's length, without drawing the order: drawing one also prepares its reading
  // (WebDataset plans its readahead for that epoch), which a question about the length must not.
  virtual std::optional<std::int64_t> ownEpochLength(const LoaderOptions&, std::int64_t) const { return std::nullopt; }
  // Whether ownEpochOrder gives orders (without drawing one: that shuffles every sample).
  virtual bool hasOwnEpochOrder() const { return false; }
  // Epoch `epoch` of ownEpochOrder has these samples left to read, and only these: it was stopped
  // between batches and goes on from `indices` (a retune), and the batches made ahead were dropped
  // unserved. A dataset that plans its reads from its order (WebDataset) plans the rest again.
  virtual void ownEpochRest(std::int64_t /*epoch*/, const std::int64_t* /*indices*/, std::int64_t /*count*/) const {}
  // What the open did that a user should know and may want to change (a remote WebDataset
  // downloaded its shards to scan them, which indexes or a cache spare): the loader's notes start
  // with these, and they are its advice too (Loader::advice; Python warns with them).
  virtual std::vector<std::string> openNotes() const { return {}; }

  std::int64_t sampleBytes() const;  // all fields of one sample
  std::int64_t totalBytes() const { return sampleBytes() * size(); }
};

// The order the loader serves in `epoch`: the dataset's own, or the sampler's (data/sampler).
std::vector<std::int64_t> epochIndicesFor(const Dataset& dataset, const LoaderOptions& options, std::int64_t epoch);

// Rethrows the exception in flight as Error "sample <index>: ..." (a stoker::Error keeps its kind).
[[noreturn]] void rethrowForSample(std::int64_t index);

// A dataset by its spec, as `--dataset` and the workbench's picker take it (each kind is one file in
// data/datasets/, dispatched by data/datasets/open_dataset.cpp):
//   fashion-mnist[:DIR]   Debian's dataset-fashion-mnist (train split)
//   synthetic:N,SHAPE[,dtype][,cost_us[,wait_us]]
//   PATH.safetensors      tensors sharing dim 0 become fields
//   PATH.npy              one field, "data"
//   imagefolder:DIR       torchvision's ImageFolder (JPEG, PNG) through options.transforms
//   tokens:FILE.bin[,dtype=u16|u32][,ctx=N]   nanoGPT's flat token file
//   megatron:PREFIX[,ctx=N]                    Megatron-LM's .idx/.bin, packed
//   wds:SHARDS[,shuffle=N]                     WebDataset tar shards (brace range or glob)
// reader_mode/part_size/max_inflight_parts decide how tensor files reach memory; `transforms`
// shapes image datasets.
std::shared_ptr<Dataset> openDataset(const std::string& spec, const LoaderOptions& options = {});
// openDataset for a summary (`stoker dataset info`): an image dataset opened without transforms
// lists its samples and labels, with an `images` field of no fixed shape (empty, 0 bytes) whose
// samples cannot be read; every other kind opens as openDataset opens it.
std::shared_ptr<Dataset> openDatasetToList(const std::string& spec, const LoaderOptions& options = {});
// Whether the spec's kind is shaped by `transforms` (imagefolder:, wds:); an unknown spec is refused.
bool datasetTakesTransforms(const std::string& spec);
// Error(BadInput) naming `subject` (the CLI's "--transforms", the Python keyword "transforms")
// when `transforms` is set for a spec whose kind is read as stored.
void refuseTransformsUnlessImages(const std::string& spec, const std::string& transforms, const std::string& subject);
// Whether the spec reads from s3:// or http(s):// (its path after "kind:", or the whole spec).
bool datasetIsRemote(const std::string& spec);
// The kinds openDataset knows, as "prefix:ARGS  what" lines (for errors, --help and the picker).
std::vector<std::string> datasetKinds();

}  // namespace stoker
