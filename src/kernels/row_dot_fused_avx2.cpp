// One token's dot straight from a stored Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS row (decode's case): the
// values, sub-scales and mins stay in registers instead of passing through the unpacked row. The
// integers are the unpacked path's and are summed into the same lanes, so the result is its
// scalar twin's bit for bit.
#include "kernels/row_unpack.h"

#include <cstring>

#include "core/cpu.h"
#include "kernels/ggml_blocks.h"

#if KVLM_X86
#include "kernels/row_quant_avx2.h"

namespace kvlm {

namespace {

using namespace row_avx2;

KVLM_TARGET_BEGIN("avx2,fma,f16c")

// sum_8_lanes of a register's lanes.
float sum_lanes(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return kvlm::sum_8_lanes(l);
}

// Q4_K and Q5_K (Q4_K's layout with 32 bytes of fifth bits after the scales).
template <bool Five>
float k4_row(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  constexpr size_t kBytes = Five ? 176 : 144, kValues = Five ? 48 : 16;
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const int16_t* xs = a.s16.data() + static_cast<size_t>(t) * (a.in / 16);
  __m256 acc = _mm256_setzero_ps(), macc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * kBytes;
    prefetch_ahead(b, kBytes);
    const __m128i sm = k4_scales_and_mins(b + 4);  // 8 scale bytes, then 8 min bytes
    // Scales as int16 in both halves; sub-block s's scale spread over a register by a shuffle.
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    [[maybe_unused]] const __m256i h = Five ? load32(b + 16) : _mm256_setzero_si256();
    __m256i isum = _mm256_setzero_si256();
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load32(b + kValues + 32 * c);
      __m256i lo = bits_at(v, 0, 0xF), hi = bits_at(v, 4, 0xF);
      if constexpr (Five) {  // bit 2c (2c + 1) of byte l is value l's fifth bit in the low (high) half
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(bits_at(h, 2 * c, 1), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(bits_at(h, 2 * c + 1, 1), 4));
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
  return sum_lanes(acc) - sum_lanes(macc);
}

// IQ4_XS: per 32 values, 16 bytes of nibbles through the non-linear levels and a 6-bit scale.
float iq4_xs(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  const __m256i iq4 = levels(kIq4Levels);
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * 136;
    prefetch_ahead(b, 136);
    uint16_t scales_h;
    std::memcpy(&scales_h, b + 2, 2);
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | (((scales_h >> (2 * g)) & 3) << 4);
      const __m256i w = _mm256_shuffle_epi8(iq4, nibbles32(b + 8 + 16 * g));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
      // |w| as the unsigned operand, w's sign moved onto x.
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(static_cast<short>(ls - 32))));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16c_at(b) * xd[sb]), acc);
  }
  return sum_lanes(acc);
}

// Q6_K's and Q3_K's values kept unsigned (stored + Offset: 0..63, 0..7) and Offset * x taken off
// each pair, as (q - Offset) * x, the unpacker's signed value. Per super-block of Bytes, its f16
// scale at DAt; Scales gives the sixteen sub-scales, Values half n's four groups of 32.
template <int Offset, size_t Bytes, size_t DAt, void (*Scales)(const uint8_t*, int16_t*),
          void (*Values)(const uint8_t*, int, __m256i*)>
float offset_row(const uint8_t* row, int in, const QuantizedActs& a, int t) {
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const __m256i offset = _mm256_set1_epi8(Offset);
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < in / 256; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * Bytes;
    prefetch_ahead(b, Bytes);
    alignas(32) int16_t sc[16];
    Scales(b, sc);
    const int8_t* x = xq + static_cast<size_t>(sb) * 256;
    __m256i isum = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      __m256i q[4];
      Values(b, n, q);
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * n + k;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xv), _mm256_maddubs_epi16(offset, xv));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sixteen_scales(sc + 2 * g)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16c_at(b + DAt) * xd[sb]), acc);
  }
  return sum_lanes(acc);
}

// Q6_K's sub-scales: 16 int8 at byte 192.
void q6k_scales(const uint8_t* b, int16_t* sc) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc),
                      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
}

// Q3_K's sixteen 6-bit sub-scales (ggml_blocks' q3k_scales, the same values): the four 32-bit
// words rebuilt with integer ops and widened in one register, inline, since decode pays for them
// once per 256 values of every row (docs/benchmarks.md has what the out-of-line decoder cost).
void q3k_scales_inline(const uint8_t* b, int16_t* sc) {
  uint32_t aux[3];
  std::memcpy(aux, b + 96, 12);
  constexpr uint32_t k2 = 0x0f0f0f0f, k1 = 0x03030303;
  const __m128i s = _mm_set_epi32(static_cast<int>(((aux[1] >> 4) & k2) | (((aux[2] >> 6) & k1) << 4)),
                                  static_cast<int>(((aux[0] >> 4) & k2) | (((aux[2] >> 4) & k1) << 4)),
                                  static_cast<int>((aux[1] & k2) | (((aux[2] >> 2) & k1) << 4)),
                                  static_cast<int>((aux[0] & k2) | ((aux[2] & k1) << 4)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(sc), _mm256_cvtepi8_epi16(_mm_sub_epi8(s, _mm_set1_epi8(32))));
}

// Q3_K's values of half n, unsigned: two bits, plus 4 where the high bit is set.
void q3k_values(const uint8_t* b, int n, __m256i q[4]) {
  const __m256i hm = load32(b), v = load32(b + 32 + 32 * n);
  for (int j = 0; j < 4; ++j) q[j] = _mm256_or_si256(bits_at(v, 2 * j, 3), _mm256_slli_epi16(bits_at(hm, 4 * n + j, 1), 2));
}

KVLM_TARGET_END

}  // namespace

bool row_dot_stored_avx2(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out) {
  if (a.block != 256) return false;
  switch (type) {
    case DType::Q4_K: *out = k4_row<false>(row, in, a, t); return true;
    case DType::Q5_K: *out = k4_row<true>(row, in, a, t); return true;
    case DType::Q6_K: *out = offset_row<32, 210, 208, q6k_scales, q6k_values>(row, in, a, t); return true;
    case DType::Q3_K: *out = offset_row<4, 110, 108, q3k_scales_inline, q3k_values>(row, in, a, t); return true;
    case DType::IQ4_XS: *out = iq4_xs(row, in, a, t); return true;
    default: return false;
  }
}

}  // namespace kvlm
#endif  // KVLM_X86
