// Fuzz target: a DALI WebDataset index (<shard>.idx, `wds:SHARDS,index=dali`): the version line,
// the sample lines of "ext offset size [name]" and their check against the shard's size, then
// every sample read as a loader worker reads it (the span holding the image and its .cls, the
// label, the decode). The shard is a fixed 8 KiB, so offsets and sizes are what vary.
#include "data/datasets/web_dataset.h"
#include "fuzz_read_samples.h"
#include "fuzz_target.h"

STOKER_FUZZ_TARGET(wds_index) {
  const std::string shard = stoker::fuzz::writeScratchFile("shard-000000.tar", std::string(8192, '7'));
  stoker::fuzz::writeScratchFile("shard-000000.idx", data, size);
  stoker::WebDatasetOptions options;
  options.shuffleBuffer = 0;
  options.keepBadSamples = true;  // so a bad sample's read runs too
  options.daliIndex = true;
  const stoker::WebDataset wds("wds:" + shard, {shard}, "Resize(8),CenterCrop(8)", options);
  stoker::fuzz::readEachSample(wds);
}
