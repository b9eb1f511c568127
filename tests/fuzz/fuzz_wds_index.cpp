// Fuzz target: a DALI WebDataset index (<shard>.idx, `wds:SHARDS,index=dali`): the version line,
// the sample lines of "ext offset size [name]" and their check against the shard's size, then
// every sample read as a loader worker reads it (the span holding the image and its .cls, the
// label, the decode). The shard is a fixed 8 KiB, so offsets and sizes are what vary.
#include "data/datasets/web_dataset.h"
#include "fuzz_target.h"
#include "util/error.h"

STOKER_FUZZ_TARGET(wds_index) {
  const std::string shard = stoker::fuzz::writeScratchFile("shard-000000.tar", std::string(8192, '7'));
  stoker::fuzz::writeScratchFile("shard-000000.idx", data, size);
  stoker::WebDatasetOptions options;
  options.shuffleBuffer = 0;
  options.keepBadSamples = true;  // so a bad sample's read runs too
  options.daliIndex = true;
  const stoker::WebDataset wds("wds:" + shard, {shard}, "Resize(8),CenterCrop(8)", options);
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
