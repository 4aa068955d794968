// AVX2 pieces shared by the row-quant kernels (row_unpack_avx2.cpp, row_dot_fused_avx2.cpp),
// compiled for the target those files' kernels use. x86 only.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/cpu.h"

KVLM_TARGET_BEGIN("avx2,fma,f16c")
namespace kvlm::row_avx2 {

// Decode reads every row once, and the hardware prefetcher alone left it well under the memory's
// bandwidth: each block asks for the bytes 4 KB ahead, one line at a time (a whole row asked for
// at once stalled on the line fill buffers; 1 KB ahead was too close to hide the latency).
constexpr size_t kPrefetchAhead = 4096;
inline void prefetch_ahead(const uint8_t* block, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchAhead + o), _MM_HINT_T0);
}

// The f16 value at p through F16C (the scalar twins' f16_to_f32, exactly, in one instruction).
inline float f16c_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(void* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Byte-wise (v >> k) & mask: the 16-bit shift's spill from the neighbour byte is masked off.
inline __m256i bits_at(__m256i v, int k, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(k)), _mm256_set1_epi8(static_cast<char>(mask)));
}
// A 16-entry level table in both 128-bit lanes (shuffle_epi8 looks up within a lane).
inline __m256i levels(const int8_t* t) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
// Value j of 32 from byte j's low nibble (j < 16) or byte j - 16's high nibble.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m4 = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

// Int16 lanes 0-7 take s[0], 8-15 s[1]: a 32-value group's two sixteen-scales as madd_epi16's
// other operand.
inline __m256i sixteen_scales(const int16_t* s) {
  int32_t pair;
  std::memcpy(&pair, s, 4);
  const __m128i v = _mm_unpacklo_epi16(_mm_cvtsi32_si128(pair), _mm_cvtsi32_si128(pair));
  return _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(v), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// Q4_K / Q5_K's 12 bytes of 6-bit scales and mins at p rearranged into 16 bytes: the 8 sub-block
// scales, then the 8 mins (ggml's AVX2 arrangement; the scalar twin decodes them one by one).
inline __m128i k4_scales_and_mins(const uint8_t* p) {
  uint32_t u[4];
  std::memcpy(u, p, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
  const uint32_t low_mins = u[1] & m6;
  u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
  u[2] = low_mins;
  u[0] &= m6;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// Half n (0, 1) of a Q6_K block's 256 values as four registers of 32, unsigned (0..63: the
// stored value before its -32). The high bit pairs are masked before moving up, so nothing
// crosses into a neighbour byte.
inline void q6k_values(const uint8_t* b, int n, __m256i q[4]) {
  const __m256i l0 = load32(b + 64 * n), l1 = load32(b + 64 * n + 32), h = load32(b + 128 + 32 * n);
  q[0] = _mm256_or_si256(bits_at(l0, 0, 0xF), _mm256_slli_epi16(bits_at(h, 0, 3), 4));
  q[1] = _mm256_or_si256(bits_at(l1, 0, 0xF), _mm256_slli_epi16(bits_at(h, 2, 3), 4));
  q[2] = _mm256_or_si256(bits_at(l0, 4, 0xF), _mm256_slli_epi16(bits_at(h, 4, 3), 4));
  q[3] = _mm256_or_si256(bits_at(l1, 4, 0xF), _mm256_slli_epi16(bits_at(h, 6, 3), 4));
}

}  // namespace kvlm::row_avx2
KVLM_TARGET_END
