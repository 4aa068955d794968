// The row-quant prefill on AVX2, for CPUs without AVX-512: the tile layout of row_tiles.h read a
// half quad (8 rows x 4 bytes, one ymm) at a time, each register shared by 4 tokens. VPMADDUBSW
// multiplies unsigned by signed bytes into int16 pairs, saturating, so every weight byte is lifted
// into a range whose pairs cannot saturate against activations of at most 127 in magnitude, and
// the lift comes back out through the activations' sums, exact in int32:
// - super-block types: lo is 0..127 as it is; hi (|hi| <= 32) is lifted by 32;
// - 32-value types by the type's own offset (Q5_0 by 16, MXFP4 by 12, the unsigned ones by 0).
//   IQ4_NL's levels reach -127, which no lift keeps unsaturated: it takes the generic path.
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
    case DType::IQ4_NL: return -1;
    default: return 32;  // the super-block types' hi bytes
  }
}

int row_tiles_avx2_unfolded_lift(DType t) {
  switch (t) {
    case DType::Q2_K: case DType::Q4_K: case DType::Q5_K: return 0;
    case DType::Q3_K: return 4;
    case DType::Q6_K: return 32;
    default: return -1;  // IQ4_XS's levels reach -127
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

// Super-block types, rows 8 * half .. 8 * half + 7; out holds the float sums between super-blocks.
template <bool HasMin>
KVLM_AVX2 void multiply_supers(const RowTiles& p, const QuantizedActs& a, float* out) {
  const int nsb = p.in / 256, n16 = a.in / 16;
  const __m256i ones = _mm256_set1_epi16(1), lift = _mm256_set1_epi8(32);
  for (int t0 = 0; t0 < a.n_padded; t0 += kTokens)
    for (int half = 0; half < 2; ++half) {
      for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(out + static_cast<size_t>(t0 + t) * kTileRows + 8 * half, _mm256_setzero_ps());
      for (int b = 0; b < nsb; ++b) {
        __m256i hi[kTokens], lo[kTokens];
        for (int t = 0; t < kTokens; ++t) hi[t] = lo[t] = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g) {
          const int8_t* tiles = p.q.data() + static_cast<size_t>(b * 4 + g) * 2 * 16 * kQuadBytes + 32 * half;
          const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in + b * 256 + g * 64;
          for (int j = 0; j < 16; ++j) {
            const __m256i bh = _mm256_add_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles + j * kQuadBytes)), lift);
            const __m256i bl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles + (16 + j) * kQuadBytes));
            for (int t = 0; t < kTokens; ++t) {
              const __m256i x = quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j);
              hi[t] = _mm256_add_epi32(hi[t], dot4(bh, x, ones));
              lo[t] = _mm256_add_epi32(lo[t], dot4(bl, x, ones));
            }
          }
        }
        const __m256 sv = _mm256_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows + 8 * half);
        for (int t = 0; t < kTokens; ++t) {
          const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 16 * b;
          int32_t xsum = 0;
          for (int k = 0; k < 16; ++k) xsum += s16[k];
          const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(_mm256_sub_epi32(hi[t], _mm256_set1_epi32(32 * xsum)), 7), lo[t]);
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

// Super-block types unfolded: each quad's byte products summed in pairs by VPMADDUBSW, then
// VPMADDWD by the sub-scale (the int16 pair of each row both the scale) adds the pairs and scales
// them in one step, as llama.cpp's AVX2 K-quant kernels do; the lift comes out through the
// sub-scales' pair products with the activations' sums. 8 tokens share each load.
template <bool HasMin, int Sub>
KVLM_AVX2 void multiply_unfolded(const RowTiles& p, const QuantizedActs& a, int lift_by, float* out) {
  constexpr int kSubs = 256 / Sub, kQuads = Sub / 4, kT = 8;
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
          for (int j = 0; j < kQuads; ++j) {
            const __m256i w = _mm256_add_epi8(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q.data() + static_cast<size_t>(quad0 + j) * kQuadBytes + 32 * half)), lift);
            for (int t = 0; t < kT; ++t)
              tot[t] = _mm256_add_epi32(tot[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w, quad_of(xq + static_cast<size_t>(t) * a.in + 4 * j)), scale));
          }
        }
        const __m256 sv = _mm256_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows + 8 * half);
        for (int t = 0; t < kT; ++t) {
          const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0 + t) * n16 + 16 * b;
          __m256i sum = tot[t];
          if (lift_by) {  // the signed types (Q3_K, Q6_K): sub-blocks of 16, the sums as they are
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

KVLM_AVX2 void pack_super_row_avx2(const RowQuants& u, int i, int8_t* q) {
  const __m256i seven_bits = _mm256_set1_epi16(127);
  alignas(32) int8_t hi[64], lo[64];
  for (int st = 0; st < u.in / 64; ++st) {
    for (int h = 0; h < 2; ++h) {  // values 32h .. 32h + 31 of the step: sixteens 2h and 2h + 1
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 64 * st + 32 * h));
      const __m256i w0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)), _mm256_set1_epi16(u.scale[4 * st + 2 * h]));
      const __m256i w1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1)), _mm256_set1_epi16(u.scale[4 * st + 2 * h + 1]));
      // packs interleave the 128-bit lanes; the permute puts the 32 bytes back in order
      const __m256i h8 = _mm256_permute4x64_epi64(_mm256_packs_epi16(_mm256_srai_epi16(w0, 7), _mm256_srai_epi16(w1, 7)), 0xD8);
      const __m256i l8 = _mm256_permute4x64_epi64(
          _mm256_packus_epi16(_mm256_and_si256(w0, seven_bits), _mm256_and_si256(w1, seven_bits)), 0xD8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(hi + 32 * h), h8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lo + 32 * h), l8);
    }
    int8_t* dst = q + static_cast<size_t>(st) * 2 * 16 * kQuadBytes + i * 4;
    for (int j = 0; j < 16; ++j) {
      std::memcpy(dst + j * kQuadBytes, hi + 4 * j, 4);
      std::memcpy(dst + (16 + j) * kQuadBytes, lo + 4 * j, 4);
    }
  }
}

void row_tile_multiply_avx2(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  static_assert(kTileTokens % kTokens == 0, "a multiply's tokens come in passes of kTokens");
  if (p.block == 256 && p.layout == TileLayout::Unfolded) {
    const int lift = row_tiles_avx2_unfolded_lift(p.type);
    KVLM_CHECK(lift >= 0 && (lift == 0 || p.sub == 16), "the AVX2 row tiles cannot take ", dtype_name(p.type), " unfolded");
    if (p.has_min) return p.sub == 16 ? multiply_unfolded<true, 16>(p, a, lift, out) : multiply_unfolded<true, 32>(p, a, lift, out);
    return p.sub == 16 ? multiply_unfolded<false, 16>(p, a, lift, out) : multiply_unfolded<false, 32>(p, a, lift, out);
  }
  const int lift = row_tiles_avx2_lift(p.type);
  KVLM_CHECK(lift >= 0, "the AVX2 row tiles cannot take ", dtype_name(p.type));
  if (p.block == 256) return p.has_min ? multiply_supers<true>(p, a, out) : multiply_supers<false>(p, a, out);
  p.has_min ? multiply_blocks<true>(p, a, act_sums, lift, out) : multiply_blocks<false>(p, a, act_sums, lift, out);
}

#else

void row_tile_multiply_avx2(const RowTiles&, const QuantizedActs&, const float*, float*) {
  KVLM_CHECK(false, "AVX2 asked for on a build without it");
}
void pack_super_row_avx2(const RowQuants&, int, int8_t*) { KVLM_CHECK(false, "AVX2 asked for on a build without it"); }

#endif

}  // namespace kvlm
