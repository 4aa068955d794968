// The AVX2 readers of a head's K or V rows, f32 or encoded, shared by the attention kernels of
// attention.cpp and attention_avx512.cpp, and the transpose that turns keys' scores into heads' runs.
#pragma once
#include "core/cpu.h"

#if KVLM_X86
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/prefetch.h"

// kvlm's avx2 row: AVX2, FMA and F16C (which widens f16 rows).
#define KVLM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvlm {

// Row readers: load8(j, d) is elements d..d+7 of row j as f32, at(j, d) the byte element d of
// row j starts at, kBits the bits per element. Encoded rows are widened in registers with the
// arithmetic of the codec's decoder (kv_quant.cpp: exact for f16 and bf16, one multiply for int8,
// one fused multiply-add for int4), so every score and value sum is bit-identical to decoding the
// rows first, without the f32 copy (which cost as much as the arithmetic).
struct F32Rows {
  const float* p;
  size_t stride;
  static constexpr int kBits = 32;
  KVLM_AVX2 __m256 load8(int j, int d) const { return _mm256_loadu_ps(p + j * stride + d); }
  const char* at(int j, int d) const { return reinterpret_cast<const char*>(p + j * stride + d); }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * sizeof(float)); }
};
// f16 and bf16 rows: two bytes a value.
struct HalfRows {
  const uint16_t* p;  // head h's first value of row 0
  size_t stride;      // values per row
  static constexpr int kBits = 16;
  const char* at(int j, int d) const { return reinterpret_cast<const char*>(p + j * stride + d); }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * 2); }
};
struct Bf16Rows : HalfRows {
  KVLM_AVX2 __m256 load8(int j, int d) const {
    // The eight values in both halves, each moved to the top of its float by one byte shuffle:
    // the same floats in the same lanes as widening then shifting, in one operation fewer.
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride + d)));
    const __m256i top = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
                                         -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(b, top));
  }
};
// Bf16Rows widened without a constant, for the value sums' tiles of four heads: they take
// all 16 registers, and the shuffle's mask left one accumulator in memory, stored and reloaded
// every key (bf16 decode attention at 16K ran 8-11% longer).
struct Bf16RowsNoMask : Bf16Rows {
  KVLM_AVX2 __m256 load8(int j, int d) const {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride + d)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
};
struct F16Rows : HalfRows {
  KVLM_AVX2 __m256 load8(int j, int d) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride + d)));
  }
};
struct Int8Rows {
  const int8_t* p;  // head h's first value of row 0
  size_t stride;    // bytes per row
  const float* scale;  // head h's scale of row 0
  size_t pstride;      // parameters per row
  static constexpr int kBits = 8;
  const char* at(int j, int d) const { return reinterpret_cast<const char*>(p + j * stride + d); }
  KVLM_AVX2 __m256 load8(int j, int d) const {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + j * stride + d));
    return _mm256_mul_ps(_mm256_set1_ps(scale[j * pstride]), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd); }
};
struct Int4Rows {
  const uint8_t* p;    // head h's first group of row 0: 16 bytes per 32 values, low nibble first
  size_t stride;       // bytes per row
  const float* prm;    // that group's scale and zero point of row 0
  size_t pstride;      // parameters per row
  static constexpr int kBits = 4;
  const char* at(int j, int d) const { return reinterpret_cast<const char*>(p + j * stride + d / 2); }
  KVLM_AVX2 __m256 load8(int j, int d) const {
    const int gi = d / 32, o = d % 32;
    uint32_t w;
    std::memcpy(&w, p + j * stride + gi * 16 + o / 2, 4);
    // Each byte twice (b0 b0 b1 b1 ..), one per lane, then shifted by 0 or 4: elements in order.
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(w));
    const __m256i twice = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(twice, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi32(0xF));
    const float* sz = prm + j * pstride + 2 * gi;
    return _mm256_fmadd_ps(_mm256_set1_ps(sz[0]), _mm256_cvtepi32_ps(q), _mm256_set1_ps(sz[1]));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd / 2); }
};

// r[x][y] <- r[y][x]: eight keys' vectors of eight heads become eight heads' runs of eight keys.
// Storing each key's eight scores one float at a time, a row apart, was a fifth of the score time.
KVLM_AVX2 inline void transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int x = 0; x < 8; x += 2) t[x] = _mm256_unpacklo_ps(r[x], r[x + 1]), t[x + 1] = _mm256_unpackhi_ps(r[x], r[x + 1]);
  for (int x = 0; x < 8; x += 4) {
    u[x] = _mm256_shuffle_ps(t[x], t[x + 2], 0x44), u[x + 1] = _mm256_shuffle_ps(t[x], t[x + 2], 0xEE);
    u[x + 2] = _mm256_shuffle_ps(t[x + 1], t[x + 3], 0x44), u[x + 3] = _mm256_shuffle_ps(t[x + 1], t[x + 3], 0xEE);
  }
  for (int x = 0; x < 4; ++x) {
    r[x] = _mm256_permute2f128_ps(u[x], u[x + 4], 0x20);
    r[x + 4] = _mm256_permute2f128_ps(u[x], u[x + 4], 0x31);
  }
}

}  // namespace kvlm
#endif  // KVLM_X86
