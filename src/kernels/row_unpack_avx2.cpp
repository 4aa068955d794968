// The AVX2 unpackers of kernels/row_dot.h: a stored row into the common form, 32 values a step.
// Integer shuffles only, so each equals its scalar twin (kernels/ggml_blocks.cpp) byte for byte.
// Q3_K's and IQ4_XS's sub-scales (a few per 256 values) go through the twin's own scalar code.
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

// 0x10 in byte j where bit j of the 32 bits at p is set (Q5_0 / Q5_1's fifth bits).
inline __m256i fifth_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi8(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The 32 values of one block of a 32-value type.
template <DType T>
__m256i block_values(const uint8_t* b) {
  if constexpr (T == DType::Q4_1) return nibbles32(b + 4);
  if constexpr (T == DType::Q5_0)
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + 6), fifth_bits(b + 2)), _mm256_set1_epi8(16));
  if constexpr (T == DType::Q5_1) return _mm256_or_si256(nibbles32(b + 8), fifth_bits(b + 4));
  if constexpr (T == DType::IQ4_NL) return _mm256_shuffle_epi8(levels(kIq4Levels), nibbles32(b + 2));
  if constexpr (T == DType::MXFP4) return _mm256_shuffle_epi8(levels(kFp4Levels), nibbles32(b + 1));
}

// Eight f16 values at p, p + stride, ... as floats (F16C: the twin's f16_to_f32, exactly).
inline __m256 f16x8(const uint8_t* p, size_t stride) {
  alignas(16) uint16_t h[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&h[i], p + i * stride, 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// The 32-value types: values and each block's d (and m) here; their scale and min are constant
// (set when the RowQuants was made).
template <DType T>
void blocks_of_32(const uint8_t* row, RowQuants& u) {
  constexpr size_t bytes = T == DType::Q4_1 ? 20 : T == DType::Q5_0 ? 22 : T == DType::Q5_1 ? 24 : T == DType::IQ4_NL ? 18 : 17;
  constexpr bool has_m = T == DType::Q4_1 || T == DType::Q5_1;
  const int blocks = u.in / 32;
  int b = 0;
  if constexpr (T != DType::MXFP4)
    for (; b + 8 <= blocks; b += 8) {
      _mm256_storeu_ps(u.d + b, f16x8(row + b * bytes, bytes));
      if constexpr (has_m)
        _mm256_storeu_ps(u.m + b, _mm256_xor_ps(f16x8(row + b * bytes + 2, bytes), _mm256_set1_ps(-0.0f)));
    }
  for (; b < blocks; ++b) {
    const uint8_t* blk = row + b * bytes;
    u.d[b] = T == DType::MXFP4 ? e8m0_half(blk[0]) : f16c_at(blk);
    if constexpr (has_m) u.m[b] = -f16c_at(blk + 2);
  }
  for (b = 0; b < blocks; ++b) {
    if (b % 4 == 0) prefetch_ahead(row + b * bytes, 1);
    store32(u.q + 32 * b, block_values<T>(row + b * bytes));
  }
}

void q4_k(const uint8_t* b, int8_t* q) {
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load32(b + 16 + 32 * c);
    store32(q + 64 * c, bits_at(v, 0, 0xF));
    store32(q + 64 * c + 32, bits_at(v, 4, 0xF));
  }
}
void q5_k(const uint8_t* b, int8_t* q) {
  const __m256i h = load32(b + 16);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load32(b + 48 + 32 * c);
    store32(q + 64 * c, _mm256_or_si256(bits_at(v, 0, 0xF), _mm256_slli_epi16(bits_at(h, 2 * c, 1), 4)));
    store32(q + 64 * c + 32, _mm256_or_si256(bits_at(v, 4, 0xF), _mm256_slli_epi16(bits_at(h, 2 * c + 1, 1), 4)));
  }
}
void q6_k(const uint8_t* b, int8_t* q) {
  const __m256i k32 = _mm256_set1_epi8(32);
  for (int n = 0; n < 2; ++n) {
    __m256i v[4];
    q6k_values(b, n, v);
    for (int k = 0; k < 4; ++k) store32(q + 128 * n + 32 * k, _mm256_sub_epi8(v[k], k32));
  }
}
void q2_k(const uint8_t* b, int8_t* q) {
  for (int n = 0; n < 2; ++n) {
    const __m256i v = load32(b + 16 + 32 * n);
    for (int j = 0; j < 4; ++j) store32(q + 128 * n + 32 * j, bits_at(v, 2 * j, 3));
  }
}
void q3_k(const uint8_t* b, int8_t* q) {
  const __m256i hm = load32(b), four = _mm256_set1_epi8(4);
  for (int n = 0; n < 2; ++n) {
    const __m256i v = load32(b + 32 + 32 * n);
    for (int j = 0; j < 4; ++j) {  // minus 4 where the high bit is clear
      const __m256i clear = _mm256_andnot_si256(_mm256_slli_epi16(bits_at(hm, 4 * n + j, 1), 2), four);
      store32(q + 128 * n + 32 * j, _mm256_sub_epi8(bits_at(v, 2 * j, 3), clear));
    }
  }
}
void iq4_xs(const uint8_t* b, int8_t* q) {
  for (int g = 0; g < 8; ++g) store32(q + 32 * g, _mm256_shuffle_epi8(levels(kIq4Levels), nibbles32(b + 8 + 16 * g)));
}

// Sixteen int16 sub-scales from 8 bytes, each twice (a 32-value sub-block's two sixteens).
inline void twice_each(const uint8_t* b8, int16_t* out) {
  const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b8)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v)));
}
inline void sixteen(__m128i bytes16_as_epi16_lo, __m128i hi, int16_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_set_m128i(hi, bytes16_as_epi16_lo));
}
inline void fill8(float* p, float v) { _mm256_storeu_ps(p, _mm256_set1_ps(v)); }

// Q4_K / Q5_K's sub-block scales and mins, each for both its sixteens.
inline void k4_scales(const uint8_t* p, int16_t* scale, int16_t* min) {
  uint8_t b[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b), k4_scales_and_mins(p));
  twice_each(b, scale);
  twice_each(b + 8, min);
}

// The K-quants: values and sub-scales here; Q3_K's packed scales through the twin (q null).
void super_blocks(const uint8_t* row, RowQuants& u) {
  const BlockCodec& c = *block_codec(u.type);
  for (int b = 0; b < u.in / 256; ++b) {
    const uint8_t* blk = row + b * c.bytes;
    prefetch_ahead(blk, c.bytes);
    int8_t* q = u.q + 256 * b;
    int16_t *scale = u.scale + 16 * b, *min = u.min + 16 * b;
    float *d = u.d + 8 * b, *m = u.m + 8 * b;
    switch (u.type) {
      case DType::Q2_K: {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)), m4 = _mm_set1_epi8(0xF);
        const __m128i lo = _mm_and_si128(sc, m4), hi = _mm_and_si128(_mm_srli_epi16(sc, 4), m4);
        sixteen(_mm_cvtepu8_epi16(lo), _mm_cvtepu8_epi16(_mm_srli_si128(lo, 8)), scale);
        sixteen(_mm_cvtepu8_epi16(hi), _mm_cvtepu8_epi16(_mm_srli_si128(hi, 8)), min);
        fill8(d, f16c_at(blk + 80));
        fill8(m, f16c_at(blk + 82));
        q2_k(blk, q);
        break;
      }
      case DType::Q3_K:
        c.unpack(blk, BlockOut{nullptr, scale, min, d, m});
        q3_k(blk, q);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        k4_scales(blk + 4, scale, min);
        fill8(d, f16c_at(blk));
        fill8(m, f16c_at(blk + 2));
        if (u.type == DType::Q4_K)
          q4_k(blk, q);
        else
          q5_k(blk, q);
        break;
      case DType::Q6_K: {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
        sixteen(_mm_cvtepi8_epi16(sc), _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8)), scale);
        fill8(d, f16c_at(blk + 208));
        q6_k(blk, q);
        break;
      }
      default:  // IQ4_XS
        c.unpack(blk, BlockOut{nullptr, scale, min, d, m});
        iq4_xs(blk, q);
        break;
    }
  }
}

// The SIMD dot's per-group multipliers (RowQuants::scale_lanes), from the sub-scales.
void spread_scales(RowQuants& u) {
  for (int g = 0; g < u.in / 32; ++g) store32(u.scale_lanes + 16 * g, sixteen_scales(u.scale + 2 * g));
}

bool unpack(const uint8_t* row, RowQuants& u) {
  switch (u.type) {
    case DType::Q4_1: blocks_of_32<DType::Q4_1>(row, u); return true;
    case DType::Q5_0: blocks_of_32<DType::Q5_0>(row, u); return true;
    case DType::Q5_1: blocks_of_32<DType::Q5_1>(row, u); return true;
    case DType::IQ4_NL: blocks_of_32<DType::IQ4_NL>(row, u); return true;
    case DType::MXFP4: blocks_of_32<DType::MXFP4>(row, u); return true;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: super_blocks(row, u); return true;
    default: return false;
  }
}

KVLM_TARGET_END

}  // namespace

bool unpack_row_avx2(const uint8_t* row, RowQuants& u) {
  if (!unpack(row, u)) return false;
  spread_scales(u);
  return true;
}

}  // namespace kvlm
#endif  // KVLM_X86
