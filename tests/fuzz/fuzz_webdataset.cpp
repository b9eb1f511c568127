// Fuzz target: a WebDataset tar shard (libarchive): the scan that pairs <key>.jpg|png with
// <key>.cls and locates each member's bytes, then every sample read as a loader worker reads it
// (member bytes, decode, an 8x8 crop into the batch slot). Samples that make no sense are kept
// (skip_bad_samples) so their read, not only the scan, runs too.
#include "data/datasets/web_dataset.h"
#include "fuzz_read_samples.h"
#include "fuzz_target.h"

STOKER_FUZZ_TARGET(webdataset) {
  const std::string path = stoker::fuzz::writeScratchFile("shard-000000.tar", data, size);
  stoker::WebDatasetOptions options;
  options.shuffleBuffer = 0;
  options.keepBadSamples = true;
  const stoker::WebDataset wds("wds:" + path, {path}, "Resize(8),CenterCrop(8)", options);
  stoker::fuzz::readEachSample(wds);
}
