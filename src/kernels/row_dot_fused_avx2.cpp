// One token's dot straight from a stored Q4_K, Q5_K, Q6_K or IQ4_XS row (decode's case): the values,
// sub-scales and mins stay in registers instead of passing through the unpacked row. The integers are the unpacked
// path's and are summed into the same lanes, so the result is its scalar twin's bit for bit.
#include "kernels/row_unpack.h"

#include <cstring>

#include "core/cpu.h"

#if KVLM_X86
#include <immintrin.h>

namespace kvlm {

namespace {

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

constexpr size_t kAhead = 4096;  // as the unpackers (row_unpack_avx2.cpp)

inline float f16c_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

float sum_8_lanes(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Q4_K and Q5_K (Q4_K's layout with 32 bytes of fifth bits after the scales).
template <bool Five>
float k4_row(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  constexpr size_t kBytes = Five ? 176 : 144, kValues = Five ? 48 : 16;
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const int16_t* xs = a.s16.data() + static_cast<size_t>(t) * (a.in / 16);
  const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * kBytes;
    for (size_t o = 0; o < kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(b + kAhead + o), _MM_HINT_T0);
    // The 12 bytes of 6-bit scales and mins as 8 scale bytes, then 8 min bytes (k4_scales).
    uint32_t u[4];
    std::memcpy(u, b + 4, 12);
    const uint32_t m6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & m2) << 4);
    const uint32_t low_mins = u[1] & m6;
    u[1] = (u[2] & k4) | (((u[0] >> 6) & m2) << 4);
    u[2] = low_mins;
    u[0] &= m6;
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
    // Scales as int16 in both halves; sub-block s's scale spread over a register by a shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    [[maybe_unused]] const __m256i h = Five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)) : m4;
    __m256i isum = _mm256_setzero_si256();
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kValues + 32 * c));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (Five) {  // bit 2c (2c + 1) of byte l is value l's fifth bit in the low (high) half
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one), 4));
      }
      const __m256i s_lo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c))));
      const __m256i s_hi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * (2 * c + 1))));
      const __m256i p_lo = _mm256_madd_epi16(
          _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c))), s_lo);
      const __m256i p_hi = _mm256_madd_epi16(
          _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * c + 32))), s_hi);
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(p_lo, p_hi));
    }
    const float d = f16c_at(b), dmin = f16c_at(b + 2);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xd[sb]), acc);
    // The min term, lane k for sub-block k: min * (its two sixteens' activation sums).
    const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    const __m256i min16 = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
    const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 16 * sb));
    macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(min16, sx)), _mm256_set1_ps(dmin * xd[sb]), macc);
  }
  return sum_8_lanes(acc) - sum_8_lanes(macc);
}

// IQ4_XS: per 32 values, 16 bytes of nibbles through the non-linear levels and a 6-bit scale.
float iq4_xs(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  static constexpr int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels)));
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const __m128i m4 = _mm_set1_epi8(0xF);
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * 136;
    for (size_t o = 0; o < 136; o += 64) _mm_prefetch(reinterpret_cast<const char*>(b + kAhead + o), _MM_HINT_T0);
    uint16_t scales_h;
    std::memcpy(&scales_h, b + 2, 2);
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | (((scales_h >> (2 * g)) & 3) << 4);
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * g));
      const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
      const __m256i w = _mm256_shuffle_epi8(levels, idx);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
      // |w| as the unsigned operand, w's sign moved onto x.
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(static_cast<short>(ls - 32))));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16c_at(b) * xd[sb]), acc);
  }
  return sum_8_lanes(acc);
}

// Int16 lanes 0-7 take s[0], 8-15 s[1] (madd_epi16's other operand).
inline __m256i sixteen_scales(const int16_t* s) {
  int32_t pair;
  std::memcpy(&pair, s, 4);
  const __m128i v = _mm_unpacklo_epi16(_mm_cvtsi32_si128(pair), _mm_cvtsi32_si128(pair));
  return _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(v), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// Q6_K: the six-bit values stay unsigned (0..63) and 32 * x comes off each pair, as (q - 32) * x.
float q6_k(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * 210;
    for (size_t o = 0; o < 210; o += 64) _mm_prefetch(reinterpret_cast<const char*>(b + kAhead + o), _MM_HINT_T0);
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc),
                       _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    __m256i isum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
      // The high bit pairs are masked before moving up, so nothing crosses into a neighbour byte.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4)),
      };
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * n + k;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xv), _mm256_maddubs_epi16(k32, xv));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sixteen_scales(sc + 2 * g)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16c_at(b + 208) * xd[sb]), acc);
  }
  return sum_8_lanes(acc);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace

bool row_dot_stored_avx2(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out) {
  if (a.block != 256) return false;
  switch (type) {
    case DType::Q4_K: *out = k4_row<false>(row, in, a, t); return true;
    case DType::Q5_K: *out = k4_row<true>(row, in, a, t); return true;
    case DType::Q6_K: *out = q6_k(row, in, a, t); return true;
    case DType::IQ4_XS: *out = iq4_xs(row, in, a, t); return true;
    default: return false;
  }
}

}  // namespace kvlm
#endif  // KVLM_X86
