// The row-quant prefill on AVX2, for CPUs without AVX-512: the tile layout of row_tiles.h read a
// half quad (8 rows x 4 bytes, one ymm) at a time, each register shared by several tokens.
// VPMADDUBSW multiplies unsigned by signed bytes into int16 pairs, saturating, so weights are
// read in a form whose pairs cannot saturate against activations of at most 127 in magnitude:
// - super-block types, unfolded: each value lifted into 0..63 (Q6_K by 32, Q3_K by 4; the lift
//   comes back out through the sub-scales' pair products with the activations' sums), a few
//   quads' pairs summed in int16 while no sum can overflow, then VPMADDWD by the sub-scale adds
//   and scales them in one step, as llama.cpp's AVX2 K-quant kernels do. IQ4_XS's levels reach
//   -127: its products take the sign of the weight onto the activation instead (|w| x +-x).
// - 32-value types by the type's own lift (Q5_0 by 16, MXFP4 by 12, the unsigned ones by 0).
//   IQ4_NL's levels reach -127 too: it takes the generic path.
// The float steps are the scalar twin's, in its order, so the result equals it bit for bit.
#include "kernels/row_tiles.h"

#include <cstring>

#include "core/cpu.h"
#include "core/error.h"

#if KVLM_X86
#include <immintrin.h>
#endif

namespace kvlm {

int row_tiles_avx2_lift(DType t) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: return 0;
    case DType::Q5_0: return 16;
    case DType::MXFP4: return 12;
    default: return -1;  // IQ4_NL (and the super-block types, which are read unfolded)
  }
}

#if KVLM_X86
namespace {

#define KVLM_AVX2 __attribute__((target("avx2,fma,f16c")))

constexpr int kTokens = 4;
constexpr int kQuadBytes = kTileRows * 4;

KVLM_AVX2 inline __m256i quad_of(const int8_t* xq) {
  int32_t v;
  std::memcpy(&v, xq, 4);
  return _mm256_set1_epi32(v);
}

// int32 sums of the byte products of u (unsigned) and x (signed), four to a lane.
KVLM_AVX2 inline __m256i dot4(__m256i u, __m256i x, __m256i ones) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones); }

// Super-block types unfolded, 8 tokens sharing each load. Group: quads whose int16 pair sums
// add without overflow (Q4_K's 8 x 2 x 15 x 127 < 2^15); Sign: IQ4_XS's sign trick.
template <bool HasMin, int Sub, int Group, bool Sign>
KVLM_AVX2 void multiply_unfolded(const RowTiles& p, const QuantizedActs& a, int lift_by, float* out) {
  constexpr int kSubs = 256 / Sub, kQuads = Sub / 4, kT = 8;
  static_assert(kQuads % Group == 0 && (!Sign || Group == 1), "whole groups; signed products one quad at a time");
  const int nsb = p.in / 256, n16 = a.in / 16;
  const __m256i lift = _mm256_set1_epi8(static_cast<char>(lift_by)), low16 = _mm256_set1_epi32(0xFFFF);
  for (int t0 = 0; t0 < a.n_padded; t0 += kT)
    for (int half = 0; half < 2; ++half) {
      for (int t = 0; t < kT; ++t) _mm256_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows + 8 * half, _mm256_setzero_ps());
      for (int b = 0; b < nsb; ++b) {
        __m256i tot[kT];
        for (auto& v : tot) v = _mm256_setzero_si256();
        for (int k = 0; k < kSubs; ++k) {
          const __m256i s32 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.sub_scales.data() + static_cast<size_t>(b * kSubs + k) * kTileRows + 8 * half));
          const __m256i scale = _mm256_or_si256(_mm256_and_si256(s32, low16), _mm256_slli_epi32(s32, 16));
          const int quad0 = b * 64 + k * kQuads;
          const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + 4 * quad0;
          for (int j0 = 0; j0 < kQuads; j0 += Group) {
            __m256i pairs[kT];
            for (int j = j0; j < j0 + Group; ++j) {
              const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q.data() + static_cast<size_t>(quad0 + j) * kQuadBytes + 32 * half));
              const __m256i w = Sign ? _mm256_abs_epi8(raw) : _mm256_add_epi8(raw, lift);
              for (int t = 0; t < kT; ++t) {
                __m256i x = quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j);
                if constexpr (Sign) x = _mm256_sign_epi8(x, raw);
                const __m256i m = _mm256_maddubs_epi16(w, x);
                pairs[t] = j == j0 ? m : _mm256_add_epi16(pairs[t], m);
              }
            }
            for (int t = 0; t < kT; ++t) tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(pairs[t], scale));
          }
        }
        const __m256 sv = _mm256_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows + 8 * half);
        for (int t = 0; t < kT; ++t) {
          const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 16 * b;
          __m256i sum = tot[t];
          if (lift_by) {  // the lifted types (Q3_K, Q6_K): sub-blocks of 16, the sums as they are
            __m256i corr = _mm256_setzero_si256();
            for (int pair = 0; pair < kSubs / 2; ++pair) {
              int32_t two;
              std::memcpy(&two, s16 + 2 * pair, 4);
              const auto* sp = reinterpret_cast<const __m256i*>(p.scale_pairs.data() + static_cast<size_t>(b * kSubs / 2 + pair) * kTileRows + 8 * half);
              corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_loadu_si256(sp), _mm256_set1_epi32(two)));
            }
            sum = _mm256_sub_epi32(sum, _mm256_mullo_epi32(corr, _mm256_set1_epi32(lift_by)));
          }
          const float dx = a.d[static_cast<size_t>(t0 + t) * a.nb + b];
          float* o = out + static_cast<size_t>(t0 + t) * kTileRows + 8 * half;
          __m256 acc = _mm256_fmadd_ps(_mm256_mul_ps(sv, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(sum), _mm256_loadu_ps(o));
          if constexpr (HasMin) {
            __m256i msum = _mm256_setzero_si256();
            for (int pair = 0; pair < 8; ++pair) {
              int32_t two;
              std::memcpy(&two, s16 + 2 * pair, 4);
              const auto* m = reinterpret_cast<const __m256i*>(p.mins.data() + (static_cast<size_t>(b) * 8 + pair) * kTileRows + 8 * half);
              msum = _mm256_add_epi32(msum, _mm256_madd_epi16(_mm256_loadu_si256(m), _mm256_set1_epi32(two)));
            }
            const __m256 mn = _mm256_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows + 8 * half);
            acc = _mm256_fnmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(msum), acc);
          }
          _mm256_storeu_ps(o, acc);
        }
      }
    }
}

// 32-value types: per block 8 quads, then one float step, and the min term from act_sums.
template <bool HasMin>
KVLM_AVX2 void multiply_blocks(const RowTiles& p, const QuantizedActs& a, const float* act_sums, int lift_by, float* out) {
  const int nb = p.in / 32, n16 = a.in / 16;
  const __m256i ones = _mm256_set1_epi16(1), lift = _mm256_set1_epi8(static_cast<char>(lift_by));
  for (int t0 = 0; t0 < a.n_padded; t0 += kTokens)
    for (int half = 0; half < 2; ++half) {
      __m256 acc[kTokens];
      for (auto& v : acc) v = _mm256_setzero_ps();
      for (int b = 0; b < nb; ++b) {
        __m256i s[kTokens];
        for (auto& v : s) v = _mm256_setzero_si256();
        const int8_t* tiles = p.q.data() + static_cast<size_t>(b) * 8 * kQuadBytes + 32 * half;
        const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + b * 32;
        for (int j = 0; j < 8; ++j) {
          const __m256i w = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles + j * kQuadBytes)), lift);
          for (int t = 0; t < kTokens; ++t) s[t] = _mm256_add_epi32(s[t], dot4(w, quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j), ones));
        }
        const __m256 sv = _mm256_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows + 8 * half);
        for (int t = 0; t < kTokens; ++t) {
          const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 2 * b;
          const __m256i sum = _mm256_sub_epi32(s[t], _mm256_set1_epi32(lift_by * (s16[0] + s16[1])));
          const float dx = a.d[static_cast<size_t>(t0 + t) * a.nb + b];
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(sv, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(sum), acc[t]);
          if constexpr (HasMin)
            acc[t] = _mm256_fnmadd_ps(_mm256_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows + 8 * half),
                                      _mm256_set1_ps(act_sums[static_cast<size_t>(t0 + t) * a.nb + b]), acc[t]);
        }
      }
      for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows + 8 * half, acc[t]);
    }
}

}  // namespace

void row_tile_multiply_avx2(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  static_assert(kTileTokens % kTokens == 0 && kTileTokens % 8 == 0, "a multiply's tokens come in whole passes");
  if (p.block == 256) {
    KVLM_CHECK(p.layout == TileLayout::Unfolded, "the AVX2 row tiles read super-blocks unfolded");
    switch (p.type) {
      case DType::Q2_K: return multiply_unfolded<true, 16, 4, false>(p, a, 0, out);
      case DType::Q3_K: return multiply_unfolded<false, 16, 4, false>(p, a, 4, out);
      case DType::Q4_K: return multiply_unfolded<true, 32, 8, false>(p, a, 0, out);
      case DType::Q5_K: return multiply_unfolded<true, 32, 4, false>(p, a, 0, out);
      case DType::Q6_K: return multiply_unfolded<false, 16, 2, false>(p, a, 32, out);
      case DType::IQ4_XS: return multiply_unfolded<false, 32, 1, true>(p, a, 0, out);
      default: KVLM_CHECK(false, "the AVX2 row tiles have no plan for ", dtype_name(p.type));
    }
  }
  const int lift = row_tiles_avx2_lift(p.type);
  KVLM_CHECK(lift >= 0, "the AVX2 row tiles cannot take ", dtype_name(p.type));
  p.has_min ? multiply_blocks<true>(p, a, act_sums, lift, out) : multiply_blocks<false>(p, a, act_sums, lift, out);
}

#else

void row_tile_multiply_avx2(const RowTiles&, const QuantizedActs&, const float*, float*) {
  KVLM_CHECK(false, "AVX2 asked for on a build without it");
}

#endif

}  // namespace kvlm
