#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <immintrin.h>

namespace stoker {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);  // rounds the fixed-point sums
using V4 = std::int32_t __attribute__((vector_size(16)));
using U4 = std::uint8_t __attribute__((vector_size(4)));

// Four bytes widened to four lanes (one pmovzxbd where SSE4.1 is there).
inline V4 widen4(const std::uint8_t* p) {
  U4 b;
  std::memcpy(&b, p, 4);
  return __builtin_convertvector(b, V4);
}



// One row of the horizontal pass: output pixels [outX, outX + outW) into `o` (RGB, with 4 bytes
// of slack after it). R, G, B (and the next pixel's R, ignored) ride in one 4-lane vector per tap:
// one multiply-add per tap instead of three; source buffers carry slack for that (kResampleSlack).
using HorizontalRow = void (*)(const std::uint8_t* in, const ResampleAxis& h, int outX, int outW, std::uint8_t* o);

void horizontalRowGeneric(const std::uint8_t* in, const ResampleAxis& h, int outX, int outW, std::uint8_t* o) {
  for (int xx = 0; xx < outW; ++xx) {
    const std::size_t at = static_cast<std::size_t>(outX + xx);
    const std::int32_t* k = &h.weights[at * static_cast<std::size_t>(h.ksize)];
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(h.first[at]) * 3;
    V4 s = {kHalf, kHalf, kHalf, kHalf};
    for (int x = 0, n = h.count[at]; x < n; ++x, p += 3) s += widen4(p) * k[x];
    for (int c = 0; c < 3; ++c) {  // Pillow's clip8
      const std::int32_t r = s[c] >> kPrecisionBits;
      o[xx * 3 + c] = static_cast<std::uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
    }
  }
}

// The same with SSE4.1: pmovzxbd widens, pmulld multiplies, two saturating packs are clip8, and
// the pixel leaves as one 4-byte store (its 4th byte is overwritten by the next pixel).
__attribute__((target("sse4.1"))) void horizontalRowSse41(const std::uint8_t* in, const ResampleAxis& h, int outX, int outW,
                                                           std::uint8_t* o) {
  const __m128i half = _mm_set1_epi32(kHalf);
  for (int xx = 0; xx < outW; ++xx) {
    const std::size_t at = static_cast<std::size_t>(outX + xx);
    const std::int32_t* k = &h.weights[at * static_cast<std::size_t>(h.ksize)];
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(h.first[at]) * 3;
    __m128i s = half;
    for (int x = 0, n = h.count[at]; x < n; ++x, p += 3) {
      std::int32_t word;
      std::memcpy(&word, p, 4);
      s = _mm_add_epi32(s, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(word)), _mm_set1_epi32(k[x])));
    }
    const __m128i r = _mm_srai_epi32(s, kPrecisionBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packus_epi32(r, r), _mm_setzero_si128());
    const std::int32_t word = _mm_cvtsi128_si32(bytes);
    std::memcpy(o + xx * 3, &word, 4);
  }
}

// The horizontal pass on AVX2, four taps per step and still Pillow's exact sums: each 22-bit
// weight is split into 11-bit halves (w = hi * 2048 + lo), so vpmaddwd's 16-bit products add up
// to sum(p * hi) and sum(p * lo), and sum(p * w) = (sum(p * hi) << 11) + sum(p * lo) -- the same
// integer, in one multiply-add per 4 taps and half instead of one 32-bit multiply per tap.
struct PackedTaps {
  int groups = 0;                 // groups of 4 taps per output pixel
  std::vector<std::int16_t> w;    // [pixel][group]: 16 hi, then 16 lo, in vpshufb's pixel order
};

// Lane 0 takes the group's taps 0 and 1, lane 1 taps 2 and 3, as [R R G G B B 0 0] pairs.
void packTaps(const ResampleAxis& h, int outX, int outW, PackedTaps& p) {
  p.groups = (h.ksize + 3) / 4;
  p.w.assign(static_cast<std::size_t>(outW) * static_cast<std::size_t>(p.groups) * 32, 0);
  for (int xx = 0; xx < outW; ++xx) {
    const std::size_t at = static_cast<std::size_t>(outX + xx);
    const std::int32_t* k = &h.weights[at * static_cast<std::size_t>(h.ksize)];
    for (int t = 0, n = h.count[at]; t < n; ++t) {
      std::int16_t* g = &p.w[(static_cast<std::size_t>(xx) * static_cast<std::size_t>(p.groups) +
                              static_cast<std::size_t>(t / 4)) * 32];
      const int slot = (t % 4 / 2) * 8 + t % 2;
      for (int c = 0; c < 3; ++c) {
        g[slot + c * 2] = static_cast<std::int16_t>(k[t] >> 11);
        g[16 + slot + c * 2] = static_cast<std::int16_t>(k[t] & 2047);
      }
    }
  }
}

// `first` and `count` are h's, from outX on; `w` and `groups` the packed taps. Plain pointers and
// values, not the structs: the byte stores to `o` may alias anything, and reloading a member (or a
// thread_local's) per pixel costs more than the arithmetic.
__attribute__((target("avx2"))) void horizontalRowAvx2(const std::uint8_t* in, const int* first, const int* count,
                                                        const std::int16_t* w, int groups, int outW, std::uint8_t* o) {
  // Bytes of 4 RGB pixels -> 16-bit [R0 R1 G0 G1 B0 B1 0 0 | R2 R3 G2 G3 B2 B3 0 0] (-1: a zero byte).
  const __m256i order = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,  //
                                         6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m128i half = _mm_set1_epi32(kHalf);
  for (int xx = 0; xx < outW; ++xx) {
    const std::uint8_t* p = in + static_cast<std::ptrdiff_t>(first[xx]) * 3;
    const int n = count[xx];
    __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
    for (int left = n; left > 0; left -= 4, p += 12, w += 32) {
      // 16 bytes: the group's pixels and what follows them (a partial group's missing taps have
      // zero weights); past the last pixel of a region, the decoders' 16 bytes of slack.
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m256i px = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(bytes), order);
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))));
    }
    w += static_cast<std::ptrdiff_t>(groups - (n + 3) / 4) * 32;  // groups this pixel did not use
    const __m128i sumHi = _mm_add_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
    const __m128i sumLo = _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    const __m128i s = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(sumHi, 11), sumLo), half);
    const __m128i r = _mm_srai_epi32(s, kPrecisionBits);
    const __m128i packed = _mm_packus_epi16(_mm_packus_epi32(r, r), _mm_setzero_si128());  // Pillow's clip8
    const std::int32_t word = _mm_cvtsi128_si32(packed);
    std::memcpy(o + xx * 3, &word, 4);
  }
}

}  // namespace

void bilinearAxis(int inSize, double in0, double in1, int outSize, ResampleAxis& a) {
  const double scale = (in1 - in0) / outSize;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  a.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.identity = inSize == outSize && in0 == 0.0 && in1 == inSize;
  a.first.resize(static_cast<std::size_t>(outSize));
  a.count.resize(static_cast<std::size_t>(outSize));
  a.weights.assign(static_cast<std::size_t>(outSize) * static_cast<std::size_t>(a.ksize), 0);
  a.taps.resize(static_cast<std::size_t>(a.ksize));
  double* k = a.taps.data();
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < outSize; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > inSize) xmax = inSize;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bilinear((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    std::int32_t* out = &a.weights[static_cast<std::size_t>(xx) * static_cast<std::size_t>(a.ksize)];
    for (int x = 0; x < xmax; ++x) {
      double w = k[x];
      if (ww != 0.0) w /= ww;
      out[x] = static_cast<std::int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    a.first[static_cast<std::size_t>(xx)] = xmin;
    a.count[static_cast<std::size_t>(xx)] = std::max(xmax, 0);
  }
}

InputSpan inputSpan(const ResampleAxis& axis, int out, int n) {
  InputSpan s{axis.first[static_cast<std::size_t>(out)], axis.first[static_cast<std::size_t>(out)]};
  for (int o = out; o < out + n; ++o) {
    s.first = std::min(s.first, axis.first[static_cast<std::size_t>(o)]);
    s.end = std::max(s.end, axis.first[static_cast<std::size_t>(o)] + axis.count[static_cast<std::size_t>(o)]);
  }
  return s;
}

// Built for AVX2 too (32-bit multiplies in one instruction; plain x86-64 has to emulate them),
// picked at load time by the CPU it runs on. Not under TSan: g++ instruments the resolver that
// picks, and the loader runs it while relocating the program, before TSan's runtime is up (the
// TSan build of tst_remote died with SIGSEGV in that resolver, before main).
#if defined(__SANITIZE_THREAD__)
#define STOKER_AVX2_CLONES
#else
#define STOKER_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#endif
STOKER_AVX2_CLONES void resampleRgb(const RgbRegion& src, int srcX, int srcY, const ResampleAxis& h, int outX, int outW,
                 const ResampleAxis& v, int outY, int outH, std::uint8_t* out, std::vector<std::uint8_t>& scratch) {
  // Source rows the chosen output rows read (Pillow's ybox_first / ybox_last, for this window).
  const InputSpan span = inputSpan(v, outY, outH);
  const int rowFirst = span.first, rows = span.end - span.first;
  auto srcRow = [&](int y) {  // input row y (axis coordinates) -> bytes of its pixel at input x = 0
    return src.pixels + static_cast<std::ptrdiff_t>(srcY + y - src.rect.y) * src.stride +
           static_cast<std::ptrdiff_t>(srcX - src.rect.x) * 3;
  };

  // Horizontal pass: rows [rowFirst, rowEnd) -> tmp (rows x outW x 3), or the source itself.
  const std::uint8_t* tmp;
  std::ptrdiff_t tmpStride;
  if (h.identity) {
    tmp = srcRow(rowFirst) + static_cast<std::ptrdiff_t>(outX) * 3;
    tmpStride = src.stride;
  } else {
    scratch.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(outW) * 3 + 4);
    static const bool avx2 = __builtin_cpu_supports("avx2");
    static const HorizontalRow horizontal = __builtin_cpu_supports("sse4.1") ? horizontalRowSse41 : horizontalRowGeneric;
    if (avx2) {
      thread_local PackedTaps taps;
      packTaps(h, outX, outW, taps);
      const int* first = h.first.data() + outX;
      const int* count = h.count.data() + outX;
      for (int y = 0; y < rows; ++y)
        horizontalRowAvx2(srcRow(rowFirst + y), first, count, taps.w.data(), taps.groups, outW,
                          scratch.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(outW) * 3);
    } else {
      for (int y = 0; y < rows; ++y)
        horizontal(srcRow(rowFirst + y), h, outX, outW, scratch.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(outW) * 3);
    }
    tmp = scratch.data();
    tmpStride = static_cast<std::ptrdiff_t>(outW) * 3;
  }

  // Vertical pass: tmp -> out.
  const std::size_t outStride = static_cast<std::size_t>(outW) * 3;
  if (v.identity) {
    for (int y = 0; y < outH; ++y)
      std::copy_n(tmp + static_cast<std::ptrdiff_t>(outY + y - rowFirst) * tmpStride, outStride, out + y * outStride);
    return;
  }
  // Row by row: acc[x] += row[x] * k over the taps, a loop the compiler vectorises.
  thread_local std::vector<std::int32_t> acc;
  acc.resize(outStride);
  for (int yy = 0; yy < outH; ++yy) {
    const std::size_t at = static_cast<std::size_t>(outY + yy);
    const std::int32_t* k = &v.weights[at * static_cast<std::size_t>(v.ksize)];
    const std::uint8_t* col = tmp + static_cast<std::ptrdiff_t>(v.first[at] - rowFirst) * tmpStride;
    std::int32_t* a = acc.data();
    std::fill(acc.begin(), acc.end(), kHalf);
    for (int y = 0, n = v.count[at]; y < n; ++y, col += tmpStride) {
      const std::int32_t w = k[y];
      for (std::size_t x = 0; x < outStride; ++x) a[x] += col[x] * w;
    }
    std::uint8_t* o = out + static_cast<std::size_t>(yy) * outStride;
    for (std::size_t x = 0; x < outStride; ++x) {  // Pillow's clip8, branch-free so it vectorises
      const std::int32_t r = a[x] >> kPrecisionBits;
      o[x] = static_cast<std::uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
    }
  }
}

}  // namespace stoker
