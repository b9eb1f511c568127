#include "data/dataset.h"

#include "data/sampler.h"
#include "util/error.h"

namespace stoker {
namespace {

std::string sampleError(std::int64_t index, const std::exception& e) {
  return "sample " + std::to_string(index) + ": " + e.what();
}

}  // namespace

void rethrowForSample(std::int64_t index) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.kind(), "sample " + std::to_string(index), e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::BadInput, "", sampleError(index, e));
  }
}

void Dataset::readBatch(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst) const {
  const auto& specs = fields();
  std::vector<std::uint8_t*> slot(dst, dst + specs.size());
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      readItem(indices[i], slot.data());
    } catch (...) {
      rethrowForSample(indices[i]);
    }
    for (std::size_t f = 0; f < specs.size(); ++f) slot[f] += specs[f].sampleBytes;
  }
}

std::int64_t Dataset::sampleBytes() const {
  std::int64_t n = 0;
  for (const auto& f : fields()) n += f.sampleBytes;
  return n;
}

std::vector<std::int64_t> epochIndicesFor(const Dataset& dataset, const LoaderOptions& options, std::int64_t epoch) {
  if (auto own = dataset.ownEpochOrder(options, epoch)) return std::move(*own);
  return epochIndices(options, dataset.size(), epoch);
}

void Dataset::readSamples(const std::int64_t* indices, std::int64_t count, std::uint8_t* const* dst,
                          const ReadContext&) const {
  readBatch(indices, count, dst);
}

}  // namespace stoker
