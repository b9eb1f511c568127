// resampleRgbPlanar: Pillow's two passes with each channel in a plane of its own, so the AVX2 code
// computes 8 output values per vector instead of one RGB pixel (3 of 8 lanes) with a horizontal
// reduction after it. Same weights, same integer sums, same u8 between the passes: the output
// equals resampleRgb's byte for byte.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "image/resample.h"

namespace stoker {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS, as in resample.cpp
constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);

// The horizontal pass's plan, the same for every row. Output pixels go in blocks of 32: eight
// lanes of four pixels, lane L in 256-bit vector L % 4, half L / 4, the order two rounds of packs
// leave them in. Lane L reads a 16-byte window of a channel's plane from base[L]; per pair of taps,
// a vpshufb control puts each of its 4 pixels' two source bytes in 16-bit words (0x80: a zero for
// a tap the pixel lacks) and vpmaddwd multiplies them by the 11-bit halves of Pillow's 22-bit
// weights (w = hi * 2048 + lo, as in resample.cpp's AVX2 pass), so the sums stay exact. Per block
// and pair: the 4 vectors' controls, then their hi weights, then their lo weights (32 bytes each).
constexpr int kBlock = 32;
constexpr std::size_t kPairBytes = 3 * 4 * 32;

struct LanePlan {
  int blocks = 0, pairs = 0;
  int srcFirst = 0, srcCount = 0;  // the source columns the pass reads
};

// False when some lane's pixels read more than 16 source pixels (a reduction of about 3x or more).
bool planLanes(const ResampleAxis& h, int outX, int outW, bool mirror, LanePlan& p, std::vector<std::int32_t>& base,
               std::vector<std::uint8_t>& packed) {
  int most = 1;
  for (int i = outX; i < outX + outW; ++i) most = std::max(most, h.count[static_cast<std::size_t>(i)]);
  if (most > 16) return false;
  const InputSpan span = inputSpan(h, outX, outW);
  const int first = span.first;
  p.srcFirst = first;
  p.srcCount = span.end - first;
  p.pairs = (most + 1) / 2;
  p.blocks = (outW + kBlock - 1) / kBlock;
  base.assign(static_cast<std::size_t>(p.blocks) * 8, 0);
  packed.assign(static_cast<std::size_t>(p.blocks) * static_cast<std::size_t>(p.pairs) * kPairBytes, 0);
  auto source = [&](int i) { return outX + (mirror ? outW - 1 - i : i); };  // written column -> axis pixel
  auto pair = [&](int b, int t) {
    return &packed[(static_cast<std::size_t>(b) * static_cast<std::size_t>(p.pairs) + static_cast<std::size_t>(t)) * kPairBytes];
  };
  for (int b = 0; b < p.blocks; ++b)
    for (int lane = 0; lane < 8; ++lane) {
      int from = INT_MAX;
      for (int s = 0; s < 4; ++s)
        if (const int i = b * kBlock + lane * 4 + s; i < outW) from = std::min(from, h.first[static_cast<std::size_t>(source(i))] - first);
      if (from == INT_MAX) from = 0;  // a lane past the row's end: all taps zero
      base[static_cast<std::size_t>(b) * 8 + static_cast<std::size_t>(lane)] = from;
      const std::size_t at = static_cast<std::size_t>(lane % 4) * 32 + static_cast<std::size_t>(lane / 4) * 16;
      for (int t = 0; t < p.pairs; ++t) std::memset(pair(b, t) + at, 0x80, 16);
      for (int s = 0; s < 4; ++s) {
        const int i = b * kBlock + lane * 4 + s;
        if (i >= outW) continue;
        const auto x = static_cast<std::size_t>(source(i));
        const int f = h.first[x] - first - from, n = h.count[x];
        if (f + n > 16) return false;
        const std::int32_t* k = &h.weights[x * static_cast<std::size_t>(h.ksize)];
        for (int t = 0; t < n; ++t) {
          std::uint8_t* g = pair(b, t / 2);
          const std::size_t byte = at + static_cast<std::size_t>(s * 2 + t % 2) * 2;  // the tap's 16-bit word
          g[byte] = static_cast<std::uint8_t>(f + t);
          const auto hi = static_cast<std::int16_t>(k[t] >> 11), lo = static_cast<std::int16_t>(k[t] & 2047);
          std::memcpy(g + 128 + byte, &hi, 2);
          std::memcpy(g + 256 + byte, &lo, 2);
        }
      }
    }
  return true;
}

// Splits RGB pixels into three planes, 32 pixels per step (each 128-bit half does 16 of them
// from 48 bytes with three vpshufb per plane).
__attribute__((target("avx2"))) void deinterleaveRow(const std::uint8_t* in, int n, std::uint8_t* r, std::uint8_t* g,
                                                      std::uint8_t* b) {
  alignas(32) static const auto masks = [] {
    std::array<std::array<std::array<std::uint8_t, 32>, 3>, 3> m{};  // [plane][part of 48 bytes][byte]
    for (int c = 0; c < 3; ++c)
      for (int part = 0; part < 3; ++part)
        for (int k = 0; k < 16; ++k) {
          const int from = 3 * k + c - 16 * part;
          const auto v = static_cast<std::uint8_t>(from >= 0 && from < 16 ? from : 0x80);
          m[static_cast<std::size_t>(c)][static_cast<std::size_t>(part)][static_cast<std::size_t>(k)] = v;
          m[static_cast<std::size_t>(c)][static_cast<std::size_t>(part)][static_cast<std::size_t>(k) + 16] = v;
        }
    return m;
  }();
  std::uint8_t* planes[3] = {r, g, b};
  int x = 0;
  for (; x + 32 <= n; x += 32, in += 96) {
    const __m256i part[3] = {
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(in + 48), reinterpret_cast<const __m128i*>(in)),
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(in + 64), reinterpret_cast<const __m128i*>(in + 16)),
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(in + 80), reinterpret_cast<const __m128i*>(in + 32))};
    for (std::size_t c = 0; c < 3; ++c) {
      __m256i v = _mm256_shuffle_epi8(part[0], _mm256_load_si256(reinterpret_cast<const __m256i*>(masks[c][0].data())));
      v = _mm256_or_si256(v, _mm256_shuffle_epi8(part[1], _mm256_load_si256(reinterpret_cast<const __m256i*>(masks[c][1].data()))));
      v = _mm256_or_si256(v, _mm256_shuffle_epi8(part[2], _mm256_load_si256(reinterpret_cast<const __m256i*>(masks[c][2].data()))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes[c] + x), v);
    }
  }
  for (; x < n; ++x, in += 3) r[x] = in[0], g[x] = in[1], b[x] = in[2];
}

// Eight dword sums (hi and lo halves) -> Pillow's (sum + half) >> 22, before clip8.
__attribute__((target("avx2"))) inline __m256i finish(__m256i hi, __m256i lo) {
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo), _mm256_set1_epi32(kHalf));
  return _mm256_srai_epi32(s, kPrecisionBits);
}

// clip8 of 32 dword results in four vectors, stored as 32 bytes: v0..v3's low halves, then their
// high halves.
__attribute__((target("avx2"))) inline void store32(__m256i v0, __m256i v1, __m256i v2, __m256i v3, std::uint8_t* o) {
  const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(v0, v1), _mm256_packus_epi32(v2, v3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), bytes);
}

// Lanes (v, v + 4) of a block: 8 output values of one channel, before clip8.
__attribute__((target("avx2"))) inline __m256i laneSums(const std::uint8_t* plane, const std::int32_t* base, int v,
                                                        const std::uint8_t* g, int pairs) {
  const __m256i win = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(plane + base[v + 4]),
                                          reinterpret_cast<const __m128i*>(plane + base[v]));
  __m256i hi = _mm256_setzero_si256(), lo = hi;
  for (g += v * 32; pairs > 0; --pairs, g += kPairBytes) {
    const __m256i px = _mm256_shuffle_epi8(win, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 128))));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 256))));
  }
  return finish(hi, lo);
}

// One source row's horizontal pass: `channels` (3, or 1 for gray) planes of plan.srcCount pixels
// (+16 bytes of slack) into as many rows of plan.blocks * 32 bytes, `stride` apart.
__attribute__((target("avx2"))) void horizontalRow(const std::uint8_t* const planes[3], int channels, const LanePlan& plan,
                                                    const std::int32_t* base, const std::uint8_t* packed, std::uint8_t* out,
                                                    std::ptrdiff_t stride) {
  const int pairs = plan.pairs;
  for (int b = 0; b < plan.blocks; ++b, base += 8, packed += static_cast<std::size_t>(pairs) * kPairBytes)
    for (int c = 0; c < channels; ++c) {
      const std::uint8_t* pl = planes[c];
      store32(laneSums(pl, base, 0, packed, pairs), laneSums(pl, base, 1, packed, pairs), laneSums(pl, base, 2, packed, pairs),
              laneSums(pl, base, 3, packed, pairs), out + c * stride + b * kBlock);
    }
}

// The vertical pass over rows of `width` bytes (the `channels` channels side by side, each
// `channelWidth` wide, a multiple of 32), two source rows per vpmaddwd. Output row yy's channel c
// goes to out.data + c * planeStride + yy * rowStride, its first outW bytes.
__attribute__((target("avx2"))) void verticalPass(const std::uint8_t* tmp, std::ptrdiff_t width, int rowFirst,
                                                   const ResampleAxis& v, int outY, int outH, int channels, int channelWidth,
                                                   int outW, const PlanarOut& out, std::vector<std::int32_t>& pairs) {
  for (int yy = 0; yy < outH; ++yy) {
    const auto at = static_cast<std::size_t>(outY + yy);
    const std::int32_t* k = &v.weights[at * static_cast<std::size_t>(v.ksize)];
    const int n = v.count[at];
    // Per pair of taps, its hi and lo weight halves as two 16-bit words (an odd last tap pairs
    // with a zero weight).
    pairs.resize(static_cast<std::size_t>(n + 1));
    for (int t = 0; t < n; t += 2) {
      auto word = [&](int i, bool hi) { return i < n ? static_cast<std::uint32_t>(hi ? k[i] >> 11 : k[i] & 2047) : 0u; };
      pairs[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(word(t, true) | word(t + 1, true) << 16);
      pairs[static_cast<std::size_t>(t) + 1] = static_cast<std::int32_t>(word(t, false) | word(t + 1, false) << 16);
    }
    const std::uint8_t* row0 = tmp + static_cast<std::ptrdiff_t>(v.first[at] - rowFirst) * width;
    const __m256i zero = _mm256_setzero_si256();
    for (int c = 0; c < channels; ++c)
      for (int col = 0; col < outW; col += 32) {
        const std::uint8_t* column = row0 + c * channelWidth + col;
        __m256i hi[4] = {zero, zero, zero, zero}, lo[4] = {zero, zero, zero, zero};
        for (int t = 0; t < n; t += 2) {
          const std::uint8_t* r0 = column + static_cast<std::ptrdiff_t>(t) * width;
          const std::uint8_t* r1 = t + 1 < n ? r0 + width : r0;
          const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0));
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1));
          const __m256i abLo = _mm256_unpacklo_epi8(a, b), abHi = _mm256_unpackhi_epi8(a, b);
          // (row t, row t + 1) words of x 0-3 | 16-19, 4-7 | 20-23, 8-11 | 24-27, 12-15 | 28-31
          const __m256i w[4] = {_mm256_unpacklo_epi8(abLo, zero), _mm256_unpackhi_epi8(abLo, zero),
                                _mm256_unpacklo_epi8(abHi, zero), _mm256_unpackhi_epi8(abHi, zero)};
          const __m256i wHi = _mm256_set1_epi32(pairs[static_cast<std::size_t>(t)]);
          const __m256i wLo = _mm256_set1_epi32(pairs[static_cast<std::size_t>(t) + 1]);
          for (int q = 0; q < 4; ++q) {
            hi[q] = _mm256_add_epi32(hi[q], _mm256_madd_epi16(w[q], wHi));
            lo[q] = _mm256_add_epi32(lo[q], _mm256_madd_epi16(w[q], wLo));
          }
        }
        std::uint8_t* o = out.data + c * out.planeStride + yy * out.rowStride + col;
        // Packing [0-3|16-19] [4-7|20-23] then [8-11|24-27] [12-15|28-31] leaves x 0-31 in order.
        if (col + 32 <= outW) {
          store32(finish(hi[0], lo[0]), finish(hi[1], lo[1]), finish(hi[2], lo[2]), finish(hi[3], lo[3]), o);
        } else {
          alignas(32) std::uint8_t last[32];
          store32(finish(hi[0], lo[0]), finish(hi[1], lo[1]), finish(hi[2], lo[2]), finish(hi[3], lo[3]), last);
          std::memcpy(o, last, static_cast<std::size_t>(outW - col));
        }
      }
  }
}

__attribute__((target("avx2"))) bool resampleAvx2(const RgbRegion& src, int srcX, int srcY, const ResampleAxis& h, int outX,
                                                   int outW, const ResampleAxis& v, int outY, int outH, const PlanarOut& out,
                                                   PlanarScratch& s) {
  LanePlan plan;
  if (!planLanes(h, outX, outW, out.mirror, plan, s.base, s.packed)) return false;
  const InputSpan span = inputSpan(v, outY, outH);
  const int rowFirst = span.first, rows = span.end - span.first;
  const int channelWidth = plan.blocks * kBlock;
  const int channels = src.channels;
  const std::ptrdiff_t width = channels * static_cast<std::ptrdiff_t>(channelWidth);
  const auto planeBytes = static_cast<std::size_t>(plan.srcCount) + 32;  // + the windows' reach past the last pixel
  if (s.planes.size() < 3 * planeBytes) s.planes.resize(3 * planeBytes);
  s.hpass.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(width));
  std::uint8_t* p = s.planes.data();
  const std::uint8_t* const planes[3] = {p, p + planeBytes, p + 2 * planeBytes};
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* row = src.pixels + static_cast<std::ptrdiff_t>(srcY + rowFirst + y - src.rect.y) * src.stride +
                              static_cast<std::ptrdiff_t>(srcX + plan.srcFirst - src.rect.x) * channels;
    if (channels == 1) std::memcpy(p, row, static_cast<std::size_t>(plan.srcCount));  // gray: already a plane
    else deinterleaveRow(row, plan.srcCount, p, p + planeBytes, p + 2 * planeBytes);
    horizontalRow(planes, channels, plan, s.base.data(), s.packed.data(),
                  s.hpass.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(width), channelWidth);
  }
  if (v.identity) {
    for (int yy = 0; yy < outH; ++yy)
      for (int c = 0; c < channels; ++c)
        std::memcpy(out.data + c * out.planeStride + yy * out.rowStride,
                    s.hpass.data() + static_cast<std::ptrdiff_t>(outY + yy - rowFirst) * width + c * channelWidth,
                    static_cast<std::size_t>(outW));
    return true;
  }
  verticalPass(s.hpass.data(), width, rowFirst, v, outY, outH, channels, channelWidth, outW, out, s.pairWeights);
  return true;
}

}  // namespace

void resampleRgbPlanar(const RgbRegion& src, int srcX, int srcY, const ResampleAxis& h, int outX, int outW,
                       const ResampleAxis& v, int outY, int outH, const PlanarOut& out, PlanarScratch& scratch) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && resampleAvx2(src, srcX, srcY, h, outX, outW, v, outY, outH, out, scratch)) return;
  // Elsewhere: the interleaved resize, then split into planes (and mirrored). A gray region is
  // made RGB first (the interleaved resize knows 3 channels only) and only its plane 0 is kept.
  RgbRegion rgb = src;
  if (src.channels == 1) {
    const auto n = static_cast<std::size_t>(src.rect.width) * static_cast<std::size_t>(src.rect.height);
    scratch.rgb.resize(n * 3 + kResampleSlack);
    for (int y = 0; y < src.rect.height; ++y) {
      const std::uint8_t* in = src.pixels + static_cast<std::ptrdiff_t>(y) * src.stride;
      std::uint8_t* o = scratch.rgb.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(src.rect.width) * 3;
      for (int x = 0; x < src.rect.width; ++x) o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = in[x];
    }
    rgb.pixels = scratch.rgb.data();
    rgb.stride = static_cast<std::ptrdiff_t>(src.rect.width) * 3;
    rgb.channels = 3;
  }
  scratch.interleaved.resize(static_cast<std::size_t>(outW) * static_cast<std::size_t>(outH) * 3);
  resampleRgb(rgb, srcX, srcY, h, outX, outW, v, outY, outH, scratch.interleaved.data(), scratch.hpass);
  for (int y = 0; y < outH; ++y) {
    const std::uint8_t* row = scratch.interleaved.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(outW) * 3;
    for (int c = 0; c < src.channels; ++c) {
      std::uint8_t* o = out.data + c * out.planeStride + y * out.rowStride;
      for (int i = 0; i < outW; ++i) o[i] = row[(out.mirror ? outW - 1 - i : i) * 3 + c];
    }
  }
}

}  // namespace stoker
