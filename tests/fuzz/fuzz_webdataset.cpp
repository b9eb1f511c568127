// Fuzz target: a WebDataset tar shard (libarchive): the scan that pairs <key>.jpg|png with
// <key>.cls and locates each member's bytes, then every sample read as a loader worker reads it
// (member bytes, decode, an 8x8 crop into the batch slot). Samples that make no sense are kept
// (skip_bad_samples) so their read, not only the scan, runs too.
#include "data/datasets/web_dataset.h"
#include "fuzz_target.h"
#include "util/error.h"

STOKER_FUZZ_TARGET(webdataset) {
  const std::string path = stoker::fuzz::writeScratchFile("shard-000000.tar", data, size);
  stoker::WebDatasetOptions options;
  options.shuffleBuffer = 0;
  options.keepBadSamples = true;
  const stoker::WebDataset wds("wds:" + path, {path}, "Resize(8),CenterCrop(8)", options);
  std::vector<std::vector<std::uint8_t>> slots;
  std::vector<std::uint8_t*> dst;
  for (const auto& f : wds.fields()) slots.emplace_back(static_cast<std::size_t>(f.sampleBytes));
  for (auto& s : slots) dst.push_back(s.data());
  for (std::int64_t i = 0; i < wds.size() && i < 64; ++i) {
    try {
      wds.readItem(i, dst.data());
    } catch (const stoker::Error& e) {
      if (e.kind() != stoker::ErrorKind::BadInput) throw;  // a bad sample: the next one still reads
    }
  }
}
