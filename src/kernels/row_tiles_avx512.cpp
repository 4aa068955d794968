// The row-quant prefill on AVX-512 VNNI, for CPUs without AMX: the tile layout of row_tiles.h read
// one quad (16 rows x 4 bytes, one zmm) at a time, each quad's register shared by 8 tokens.
// VPDPBUSD multiplies unsigned by signed bytes, so the weights' bytes are flipped to q + 128 and
// the activations' sums take the 128 back out: sum(q x) = sum((q + 128) x) - 128 sum(x), exact in
// int32. The float steps are the scalar twin's, in its order, so the result equals it bit for bit.
#include "kernels/row_tiles.h"

#include <cstring>

#include "core/cpu.h"
#include "core/error.h"

#if KVLM_X86
#include "kernels/avx512_intrinsics.h"
#endif

namespace kvlm {

#if KVLM_X86
namespace {

#define KVLM_AVX512 __attribute__((target(KVLM_AVX512_TARGET)))
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12's masked builtins: see attention_avx512.cpp
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

constexpr int kTokens = 8;  // tokens per pass over a block: 2 x 8 int32 sums + 8 float sums in registers
constexpr int kQuadBytes = kTileRows * 4;

KVLM_AVX512 inline __m512i quad_of(const int8_t* xq) {
  int32_t v;
  std::memcpy(&v, xq, 4);
  return _mm512_set1_epi32(v);
}

// Super-block types: per 256 values the hi and lo sums (lo's bytes are 0..127, unsigned as they
// are), then sum = 128 * hi + lo, one float step, and the mins' pair products.
template <bool HasMin>
KVLM_AVX512 void multiply_supers(const RowTiles& p, const QuantizedActs& a, float* out) {
  const int nsb = p.in / 256, n16 = a.in / 16;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t0 = 0; t0 < a.n_padded; t0 += kTokens) {
    __m512 acc[kTokens];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int b = 0; b < nsb; ++b) {
      __m512i hi[kTokens], lo[kTokens];
      for (int t = 0; t < kTokens; ++t) hi[t] = lo[t] = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        const int8_t* tiles = p.q.data() + static_cast<size_t>(b * 4 + g) * 2 * 16 * kQuadBytes;
        const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + b * 256 + g * 64;
        for (int j = 0; j < 16; ++j) {
          const __m512i bh = _mm512_xor_si512(_mm512_loadu_si512(tiles + j * kQuadBytes), flip);
          const __m512i bl = _mm512_loadu_si512(tiles + (16 + j) * kQuadBytes);
          for (int t = 0; t < kTokens; ++t) {
            const __m512i x = quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j);
            hi[t] = _mm512_dpbusd_epi32(hi[t], bh, x);
            lo[t] = _mm512_dpbusd_epi32(lo[t], bl, x);
          }
        }
      }
      const __m512 sv = _mm512_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows);
      for (int t = 0; t < kTokens; ++t) {
        const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 16 * b;
        int32_t xsum = 0;
        for (int k = 0; k < 16; ++k) xsum += s16[k];
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_sub_epi32(hi[t], _mm512_set1_epi32(128 * xsum)), 7), lo[t]);
        const float dx = a.d[static_cast<size_t>(t0 + t) * a.nb + b];
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(sv, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc[t]);
        if constexpr (HasMin) {
          __m512i msum = _mm512_setzero_si512();
          for (int pair = 0; pair < 8; ++pair) {
            int32_t two;
            std::memcpy(&two, s16 + 2 * pair, 4);
            msum = _mm512_dpwssd_epi32(msum, _mm512_loadu_si512(p.mins.data() + (static_cast<size_t>(b) * 8 + pair) * kTileRows),
                                       _mm512_set1_epi32(two));
          }
          const __m512 mn = _mm512_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows);
          acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(mn, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(msum), acc[t]);
        }
      }
    }
    for (int t = 0; t < kTokens; ++t) _mm512_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows, acc[t]);
  }
}

// Super-block types unfolded: per sub-block (16 or 32 values) one product per value, then the
// int32 sums times the sub-scales; signed values read as q + 128, the 128 taken back out through
// the sub-scales' pair products with the activations' sums. The same int32 total as the folded
// form, and the same float steps.
template <bool HasMin, bool Lifted, int Sub>
KVLM_AVX512 void multiply_unfolded(const RowTiles& p, const QuantizedActs& a, float* out) {
  constexpr int kSubs = 256 / Sub, kQuads = Sub / 4;
  const int nsb = p.in / 256, n16 = a.in / 16;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t0 = 0; t0 < a.n_padded; t0 += kTokens) {
    __m512 acc[kTokens];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int b = 0; b < nsb; ++b) {
      __m512i tot[kTokens];
      for (auto& v : tot) v = _mm512_setzero_si512();
      for (int k = 0; k < kSubs; ++k) {
        __m512i s[kTokens];
        for (auto& v : s) v = _mm512_setzero_si512();
        const int quad0 = b * 64 + k * kQuads;
        const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + 4 * quad0;
        for (int j = 0; j < kQuads; ++j) {
          __m512i w = _mm512_loadu_si512(p.q.data() + static_cast<size_t>(quad0 + j) * kQuadBytes);
          if constexpr (Lifted) w = _mm512_xor_si512(w, flip);
          for (int t = 0; t < kTokens; ++t) s[t] = _mm512_dpbusd_epi32(s[t], w, quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j));
        }
        const __m512i scale = _mm512_loadu_si512(p.sub_scales.data() + static_cast<size_t>(b * kSubs + k) * kTileRows);
        for (int t = 0; t < kTokens; ++t) tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(s[t], scale));
      }
      const __m512 sv = _mm512_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows);
      for (int t = 0; t < kTokens; ++t) {
        const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 16 * b;
        __m512i sum = tot[t];
        if constexpr (Lifted) {
          __m512i lift = _mm512_setzero_si512();
          for (int pair = 0; pair < kSubs / 2; ++pair) {
            int16_t two[2];
            for (int h = 0; h < 2; ++h) {
              const int16_t* xs = s16 + (2 * pair + h) * (Sub / 16);
              two[h] = static_cast<int16_t>(Sub == 16 ? xs[0] : xs[0] + xs[1]);
            }
            int32_t packed;
            std::memcpy(&packed, two, 4);
            lift = _mm512_dpwssd_epi32(lift, _mm512_loadu_si512(p.scale_pairs.data() + static_cast<size_t>(b * kSubs / 2 + pair) * kTileRows),
                                       _mm512_set1_epi32(packed));
          }
          sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(lift, 7));
        }
        const float dx = a.d[static_cast<size_t>(t0 + t) * a.nb + b];
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(sv, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc[t]);
        if constexpr (HasMin) {
          __m512i msum = _mm512_setzero_si512();
          for (int pair = 0; pair < 8; ++pair) {
            int32_t two;
            std::memcpy(&two, s16 + 2 * pair, 4);
            msum = _mm512_dpwssd_epi32(msum, _mm512_loadu_si512(p.mins.data() + (static_cast<size_t>(b) * 8 + pair) * kTileRows),
                                       _mm512_set1_epi32(two));
          }
          const __m512 mn = _mm512_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows);
          acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(mn, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(msum), acc[t]);
        }
      }
    }
    for (int t = 0; t < kTokens; ++t) _mm512_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows, acc[t]);
  }
}

// 32-value types: per block 8 quads, then one float step, and the min term from act_sums.
template <bool HasMin>
KVLM_AVX512 void multiply_blocks(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  const int nb = p.in / 32, n16 = a.in / 16;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int t0 = 0; t0 < a.n_padded; t0 += kTokens) {
    __m512 acc[kTokens];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int b = 0; b < nb; ++b) {
      __m512i s[kTokens];
      for (auto& v : s) v = _mm512_setzero_si512();
      const int8_t* tiles = p.q.data() + static_cast<size_t>(b) * 8 * kQuadBytes;
      const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + b * 32;
      for (int j = 0; j < 8; ++j) {
        const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(tiles + j * kQuadBytes), flip);
        for (int t = 0; t < kTokens; ++t) s[t] = _mm512_dpbusd_epi32(s[t], w, quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j));
      }
      const __m512 sv = _mm512_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows);
      for (int t = 0; t < kTokens; ++t) {
        const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 2 * b;
        const __m512i sum = _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * (s16[0] + s16[1])));
        const float dx = a.d[static_cast<size_t>(t0 + t) * a.nb + b];
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(sv, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc[t]);
        if constexpr (HasMin)
          acc[t] = _mm512_fnmadd_ps(_mm512_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows),
                                    _mm512_set1_ps(act_sums[static_cast<size_t>(t0 + t) * a.nb + b]), acc[t]);
      }
    }
    for (int t = 0; t < kTokens; ++t) _mm512_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows, acc[t]);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

void row_tile_multiply_avx512(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  static_assert(kTileTokens % kTokens == 0, "a multiply's tokens come in passes of kTokens");
  if (p.block == 32) return p.has_min ? multiply_blocks<true>(p, a, act_sums, out) : multiply_blocks<false>(p, a, act_sums, out);
  if (p.layout == TileLayout::Folded) return p.has_min ? multiply_supers<true>(p, a, out) : multiply_supers<false>(p, a, out);
  // the unfolded types: Q2_K (mins, 16), Q4_K / Q5_K (mins, 32), Q3_K / Q6_K (signed, 16), IQ4_XS (signed, 32)
  KVLM_CHECK(p.lifted != p.has_min, dtype_name(p.type), ": a super-block type both signed and with mins");
  if (p.has_min) return p.sub == 16 ? multiply_unfolded<true, false, 16>(p, a, out) : multiply_unfolded<true, false, 32>(p, a, out);
  p.sub == 16 ? multiply_unfolded<false, true, 16>(p, a, out) : multiply_unfolded<false, true, 32>(p, a, out);
}

#else

void row_tile_multiply_avx512(const RowTiles&, const QuantizedActs&, const float*, float*) {
  KVLM_CHECK(false, "AVX-512 asked for on a build without it");
}

#endif

}  // namespace kvlm
