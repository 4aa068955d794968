// The Q8_0 / Q4_0 / symmetric-int8 quantizers shared by every user of a type (weights, activations
// and KV rows round the same way). Each SIMD version has a scalar twin that tests compare it against.
#include "kernels/quantize.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>

#include "core/cpu.h"

namespace kvlm {

namespace scalar {
void quantize_symmetric_i8(const float* x, int n, int block, float* scales, int8_t* q) {
  for (int b = 0; b < n / block; ++b) {
    const float* xb = x + static_cast<size_t>(b) * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int i = 0; i < block; ++i) q[static_cast<size_t>(b) * block + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}
void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q) { quantize_symmetric_i8(x, n, 32, scales, q); }
}  // namespace scalar

#if KVLM_X86
namespace {
// The same arithmetic as the scalar twin (max is exact, round-to-nearest-even like nearbyint), for
// blocks of 32s: Q8_0's, and a head's (an int8 KV row's, the query of integer attention scores).
__attribute__((target("avx2,fma"))) void quantize_blocks_avx2(const float* x, int n, int block, float* scales, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int b = 0; b < n / block; ++b) {
    const float* xb = x + static_cast<size_t>(b) * block;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < block; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int o = 0; o < block; o += 32) {
      __m256i i32[4];
      for (int k = 0; k < 4; ++k)
        i32[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + o + 8 * k), _mm256_set1_ps(id)),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      // int32 -> int16 -> int8 packs interleave the 128-bit lanes; one permute restores order.
      const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
      const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + static_cast<size_t>(b) * block + o), i8);
    }
  }
}
}  // namespace
#endif  // KVLM_X86

void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return quantize_blocks_avx2(x, n, 32, scales, q);
#endif
  scalar::quantize_row_q8_0(x, n, scales, q);
}

void quantize_symmetric_i8(const float* x, int n, int block, float* scales, int8_t* q) {
#if KVLM_X86
  if (block % 32 == 0 && isa_at_least(Isa::Avx2)) return quantize_blocks_avx2(x, n, block, scales, q);
#endif
  scalar::quantize_symmetric_i8(x, n, block, scales, q);
}

void quantize_row_q4_0(const float* x, int n, float* scales, uint8_t* q) {
  for (int b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f, max = 0.0f;  // the signed value of largest magnitude maps to -8
    for (int i = 0; i < 32; ++i)
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int i = 0; i < 16; ++i) {
      int lo = std::min(15, static_cast<int>(xb[i] * id + 8.5f));
      int hi = std::min(15, static_cast<int>(xb[i + 16] * id + 8.5f));
      q[b * 16 + i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace kvlm
