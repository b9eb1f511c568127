#include "image/byte_expansion.h"

#include <cstring>

namespace stoker {
namespace {

template <class Value>
void expandAs(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast, Value* out) {
  Value lut[kExpandChannels][256];
  std::memcpy(lut, e.table.data(), sizeof lut);
  const auto plane = static_cast<std::uint64_t>(e.plane);
  if (!channelsLast) {  // each plane is one channel: a plain lookup run
    for (std::int64_t s = 0; s < samples; ++s)
      for (int c = 0; c < kExpandChannels; ++c) {
        const std::uint64_t base = (static_cast<std::uint64_t>(s) * kExpandChannels + static_cast<std::uint64_t>(c)) * plane;
        for (std::uint64_t p = 0; p < plane; ++p) out[base + p] = lut[c][in[base + p]];
      }
    return;
  }
  const std::uint64_t total = static_cast<std::uint64_t>(samples) * kExpandChannels * plane;
  for (std::uint64_t i = 0; i < total; ++i) out[expandedIndex(i, plane, true)] = lut[channelOf(i, plane)][in[i]];
}

}  // namespace

void expandBytesOnHost(const ByteExpansion& e, const std::uint8_t* in, std::int64_t samples, bool channelsLast, void* out) {
  if (samples <= 0 || e.plane <= 0) return;
  if (e.valueBytes == 4) expandAs(e, in, samples, channelsLast, static_cast<std::uint32_t*>(out));
  else expandAs(e, in, samples, channelsLast, static_cast<std::uint16_t*>(out));
}

}  // namespace stoker
