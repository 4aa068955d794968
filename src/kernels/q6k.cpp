#include "kernels/q6k.h"

#if defined(__x86_64__)
#include "kernels/avx512_intrinsics.h"
#endif

#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/half.h"

namespace kvlm {

namespace {
// The fixed order both versions sum their 8 float lanes in: (0+4, 1+5, 2+6, 3+7), then (0+2) + (1+3).
float sum_8_lanes(const float l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }
}  // namespace

void q6k_unpack(const uint8_t* b, int q[kQ6kBlock]) {
  for (int n = 0; n < 2; ++n) {  // as ggml's dequantize_row_q6_K unpacks them
    const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      q[128 * n + l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
      q[128 * n + l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
      q[128 * n + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      q[128 * n + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
}

namespace scalar {
float q6k_dot_row(const uint8_t* row, const QuantizedActs& a, int t) {
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  float lane[8] = {};
  int q[kQ6kBlock];
  for (int sb = 0; sb < a.in / kQ6kBlock; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * kQ6kBlockBytes;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = f16_at(b + 208);
    q6k_unpack(b, q);
    for (int g = 0; g < 8; ++g) {  // one Q8_0 activation block: values 32g..32g+31, scales 2g, 2g+1
      const int blk = sb * 8 + g;
      const float s = d * xd[blk];
      for (int j = 0; j < 8; ++j) {
        int32_t sum = 0;
        for (int v = 32 * g + 4 * j; v < 32 * g + 4 * j + 4; ++v) sum += sc[v / 16] * (q[v] - 32) * xq[32 * sb * 8 + v];
        lane[j] = std::fma(static_cast<float>(sum), s, lane[j]);
      }
    }
  }
  return sum_8_lanes(lane);
}
}  // namespace scalar

#if KVLM_X86
namespace {
__attribute__((target("avx2,fma,f16c"))) float q6k_avx2(const uint8_t* row, const QuantizedActs& a, int t) {
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < a.in / kQ6kBlock; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * kQ6kBlockBytes;
    // Per super-block, where each block of 32 built them from scalars (11% of the row's
    // time): its 16 scales as int32 lanes of two int16 copies (madd_epi16's other operand), and
    // d * xd[blk] of its 8 activation blocks, rounded as the twin rounds them.
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    __m256i sc_pairs[2];
    for (int half = 0; half < 2; ++half) {
      const __m256i s = _mm256_cvtepi8_epi32(half ? _mm_srli_si128(sc8, 8) : sc8);
      sc_pairs[half] = _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
    }
    const __m256 dx = _mm256_mul_ps(_mm256_set1_ps(f16_at(b + 208)), _mm256_loadu_ps(xd + sb * 8));
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
      // The high 2 bits, masked before the 16-bit shifts so nothing crosses into a neighbour byte.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4)),
      };
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * n + k, blk = sb * 8 + g;
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + static_cast<size_t>(blk) * 32));
        // (q0 - 32) x0 + (q1 - 32) x1 per int16 lane: |.| <= 8128, no saturation on the way.
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], x), _mm256_maddubs_epi16(k32, x));
        // int16 lanes 0-7 take scale 2g, lanes 8-15 scale 2g + 1
        const __m256i scales = _mm256_permutevar8x32_epi32(
            sc_pairs[n], _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1));
        const __m256 s = _mm256_permutevar8x32_ps(dx, _mm256_set1_epi32(g));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, scales)), s, acc);
      }
    }
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  return sum_8_lanes(lane);
}

// AVX-512 VNNI: a block's 256 values unpacked 64 at a time, vpdpbusd for q * x and 32 * x (four
// products per int32 lane, the same integers as the AVX2 pairs), the scales multiplied in int32.
// The 16 lanes hold two activation blocks; they are folded into the 8 float lanes one block after
// the other, as the scalar twin sums them, so the result is bit-identical.
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through their masked builtins, which
// -Wmaybe-uninitialized reports once inlined here; nothing is read uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target(KVLM_AVX512_TARGET))) float q6k_avx512(
    const uint8_t* row, const QuantizedActs& a, int t) {
  const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t) * a.nb;
  const __m512i m4 = _mm512_set1_epi8(0xF), m2 = _mm512_set1_epi8(3), k32 = _mm512_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int sb = 0; sb < a.in / kQ6kBlock; ++sb) {
    const uint8_t* b = row + static_cast<size_t>(sb) * kQ6kBlockBytes;
    const __m512i scales = _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    const float d = f16_at(b + 208);
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = _mm512_loadu_si512(b + 64 * n);
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
      // qh's bit pairs for values 0..63 of this half (bits 0-1, then 2-3) and 64..127 (4-5, 6-7)
      const __m512i hb = _mm512_broadcast_i64x4(h);
      const __m512i h01 = _mm512_mask_blend_epi64(0xF0, hb, _mm512_srli_epi16(hb, 2));
      const __m512i h23 = _mm512_mask_blend_epi64(0xF0, _mm512_srli_epi16(hb, 4), _mm512_srli_epi16(hb, 6));
      const __m512i q[2] = {
          _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(h01, m2), 4)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_slli_epi16(_mm512_and_si512(h23, m2), 4)),
      };
      for (int k = 0; k < 2; ++k) {
        const int v0 = 128 * n + 64 * k, blk = sb * 8 + v0 / 32;  // values v0 .. v0 + 63: blocks blk, blk + 1
        const __m512i x = _mm512_loadu_si512(xq + static_cast<size_t>(sb) * kQ6kBlock + v0);
        const __m512i z = _mm512_setzero_si512();
        const __m512i dq = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q[k], x), _mm512_dpbusd_epi32(z, k32, x));
        const int s0 = v0 / 16;  // lanes 4i..4i+3 take scale s0 + i
        const __m512i idx = _mm512_setr_epi32(s0, s0, s0, s0, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 2, s0 + 2, s0 + 2,
                                              s0 + 2, s0 + 3, s0 + 3, s0 + 3, s0 + 3);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_mullo_epi32(dq, _mm512_permutexvar_epi32(idx, scales)));
        acc = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm256_set1_ps(d * xd[blk]), acc);
        acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(f, 1), _mm256_set1_ps(d * xd[blk + 1]), acc);
      }
    }
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  return sum_8_lanes(lane);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}  // namespace
#endif

float q6k_dot_row(const uint8_t* row, const QuantizedActs& a, int t) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx512)) return q6k_avx512(row, a, t);
  if (isa_at_least(Isa::Avx2)) return q6k_avx2(row, a, t);
#endif
  return scalar::q6k_dot_row(row, a, t);
}

}  // namespace kvlm
