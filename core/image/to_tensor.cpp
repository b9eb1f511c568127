#include "image/to_tensor.h"

#include <immintrin.h>

#include <cstring>

namespace stoker {
namespace {

// q = a / b rounded to nearest, from r = 1 / b rounded to nearest: q0 = a * r is within an ulp,
// its residual a - q0 * b is exact in one FMA, and q0 + residual * r rounds to the quotient
// (Markstein). mean 0 and std 1 leave ToTensor's value unchanged: x - 0 and x / 1 are exact.
__attribute__((target("avx2,fma"))) inline __m256 divide(__m256 a, __m256 b, __m256 r) {
  const __m256 q = _mm256_mul_ps(a, r);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, b, a), r, q);
}

// ((v / 255) - mean) / std of 8 bytes.
__attribute__((target("avx2,fma"))) inline __m256 eight(const std::uint8_t* in, __m256 d255, __m256 r255, __m256 m, __m256 s,
                                                        __m256 rs) {
  std::int64_t bytes;
  std::memcpy(&bytes, in, 8);
  const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes)));
  return divide(_mm256_sub_ps(divide(v, d255, r255), m), s, rs);
}

// Planes this large go to memory with non-temporal stores: a batch of them (64 float32 images of
// 224x224 are 38 MiB) never stays in cache for its reader, and ordinary stores first read every
// line they write (75 -> 25 us per such image here, the largest single cost of the train pipeline
// after libjpeg). The stores are fenced before returning, so the batch is complete in memory when
// the worker hands it over.
constexpr std::size_t kStreamFrom = 16384;

__attribute__((target("avx2,fma"))) std::size_t toFloatAvx2(const std::uint8_t* in, std::size_t n, float mean, float std,
                                                             float* out) {
  const __m256 d255 = _mm256_set1_ps(255.0f), r255 = _mm256_set1_ps(1.0f / 255.0f);
  const __m256 m = _mm256_set1_ps(mean), s = _mm256_set1_ps(std), rs = _mm256_set1_ps(1.0f / std);
  std::size_t i = 0;
  if (n >= kStreamFrom && reinterpret_cast<std::uintptr_t>(out) % 4 == 0) {
    // The streaming stores need out + i 32-byte aligned: the first values before that go out with
    // one ordinary store of 8 (the values it writes past them are written again, the same).
    i = (32 - reinterpret_cast<std::uintptr_t>(out) % 32) % 32 / sizeof(float);
    if (i) _mm256_storeu_ps(out, eight(in, d255, r255, m, s, rs));
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(out + i, eight(in + i, d255, r255, m, s, rs));
    _mm_sfence();
    return i;
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, eight(in + i, d255, r255, m, s, rs));
  return i;
}

}  // namespace

PlaneToFloat::PlaneToFloat(float mean, float std, bool normalize)
    : mean_(normalize ? mean : 0.0f), std_(normalize ? std : 1.0f) {
  std::array<std::uint8_t, 256> bytes{};
  for (int v = 0; v < 256; ++v) {
    float x = static_cast<float>(v) / 255.0f;  // ToTensor: .float().div(255)
    if (normalize) x = (x - mean) / std;       // Normalize: .sub_(mean).div_(std)
    table_[static_cast<std::size_t>(v)] = x;
    bytes[static_cast<std::size_t>(v)] = static_cast<std::uint8_t>(v);
  }
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx2 || std_ == 0.0f) return;
  std::array<float, 256> got{};
  toFloatAvx2(bytes.data(), bytes.size(), mean_, std_, got.data());
  vector_ = std::memcmp(got.data(), table_.data(), sizeof(got)) == 0;
}

void PlaneToFloat::run(const std::uint8_t* in, std::size_t n, float* out) const {
  std::size_t i = vector_ ? toFloatAvx2(in, n, mean_, std_, out) : 0;
  for (; i < n; ++i) out[i] = table_[in[i]];
}

}  // namespace stoker
