// Stored-half weights against f32 activations. One AVX2 tile template serves the row dot (1 row
// x 1 token), decode (4 rows x 1) and prefill (3 rows x up to 4 tokens): every (row, token) pair
// keeps its own accumulator and sums in the same order, so a token's values do not depend on
// which tile it ran in. The scalar twins sum in order.
#include "kernels/half_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <utility>

#include "core/cpu.h"
#include "core/half.h"
#include "kernels/hsum.h"

namespace kvlm {

namespace scalar {
float dot_bf16(const uint16_t* w, const float* x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += bf16_to_f32(w[i]) * x[i];
  return s;
}
float dot_f16(const uint16_t* w, const float* x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += f16_to_f32(w[i]) * x[i];
  return s;
}
}  // namespace scalar

#if KVLM_X86
namespace {
// Rows per block of the many-token product: a block's weights (about 128 KiB) stay in L2 while
// every token tile passes over it.
constexpr size_t kBlockBytes = size_t{128} << 10;
// Tokens per tile: 3 rows x 4 tokens is 12 accumulators, 3 widened rows and one activation
// vector, AVX2's 16 registers (2 x 6 ran 10-21% slower: more activation bytes per multiply-add).
// One token (decode) takes 4 rows a tile: four chains, and asks for the tile two ahead as it goes
// (the hardware prefetcher stops at each 4 KiB page: decode +5-15% at 2,048 inputs, +30% at 768).
constexpr int kTileTokens = 4;

int rows_per_block(int in) {
  return std::max<int>(12, static_cast<int>(kBlockBytes / (static_cast<size_t>(in) * 2)) / 12 * 12);  // 3s and 4s
}

// Eight stored halves widened exactly: f16 by F16C (its 10-bit mantissa kept), bf16 by a shift.
template <bool F16>
__attribute__((target("avx2,fma,f16c"))) inline __m256 widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (F16)
    return _mm256_cvtph_ps(h);
  else
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <bool F16>
inline float widen1(uint16_t v) {
  return F16 ? f16_to_f32(v) : bf16_to_f32(v);
}

// out[r][t] = dot(row r, token t) for NR rows and NT tokens, both at stride `in`: one 8-lane
// chain per (row, token) over the row's 8-value blocks in order, reduced, then the tail in order.
template <bool F16, int NR, int NT>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const uint16_t* w, const float* x, int in,
                                                         float out[][kTileTokens]) {
  __m256 acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= in; i += 8) {
    if constexpr (NT == 1 && NR == 4)  // decode: each line of the tile two ahead, into L2
      if (i % 32 == 0)
        for (int r = 0; r < NR; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w + static_cast<size_t>(r + 2 * NR) * in + i), _MM_HINT_T1);
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = widen8<F16>(w + static_cast<size_t>(r) * in + i);
    for (int t = 0; t < NT; ++t) {
      __m256 xv = _mm256_loadu_ps(x + static_cast<size_t>(t) * in + i);
      asm("" : "+x"(xv));  // loaded once for all NR rows, where GCC re-read it for each
      for (int r = 0; r < NR; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      float s = hsum8_avx2(acc[r][t]);
      const uint16_t* wr = w + static_cast<size_t>(r) * in;
      const float* xt = x + static_cast<size_t>(t) * in;
      for (int j = i; j < in; ++j) s += widen1<F16>(wr[j]) * xt[j];
      out[r][t] = s;
    }
}

template <bool F16>
float dot_avx2(const uint16_t* w, const float* x, int n) {
  float v[1][kTileTokens];
  tile_avx2<F16, 1, 1>(w, x, n, v);
  return v[0][0];
}

template <bool F16, int NR, int... NT>
void tile_nt_avx2(const uint16_t* w, const float* x, int in, int nt, float out[][kTileTokens],
                  std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? tile_avx2<F16, NR, NT + 1>(w, x, in, out) : void()), ...);
}

// Rows in blocks that stay in L2; within a block, tiles of up to 4 tokens, each passed over by
// every row of the block. (Chunks of 512 values, to keep a tile's activations in L1, measured no
// faster: not kept.)
template <bool F16>
void rows_times_tokens_avx2(const uint16_t* w, const float* bias, int in, int r0, int r1, const float* x, int n,
                            float* y, int y_stride) {
  const int block = rows_per_block(in);
  for (int b0 = r0; b0 < r1; b0 += block) {
    const int b1 = std::min(r1, b0 + block);
    for (int t0 = 0; t0 < n; t0 += kTileTokens) {
      const int nt = std::min(kTileTokens, n - t0);
      const float* xt = x + static_cast<size_t>(t0) * in;
      for (int r = b0; r < b1;) {
        const int nr = nt == 1 && b1 - r >= 4 ? 4 : std::min(3, b1 - r);
        const uint16_t* wr = w + static_cast<size_t>(r) * in;
        float v[4][kTileTokens];
        if (nr == 4)
          tile_avx2<F16, 4, 1>(wr, xt, in, v);
        else if (nr == 3)
          tile_nt_avx2<F16, 3>(wr, xt, in, nt, v, std::make_integer_sequence<int, kTileTokens>{});
        else if (nr == 2)
          tile_nt_avx2<F16, 2>(wr, xt, in, nt, v, std::make_integer_sequence<int, kTileTokens>{});
        else
          tile_nt_avx2<F16, 1>(wr, xt, in, nt, v, std::make_integer_sequence<int, kTileTokens>{});
        for (int k = 0; k < nr; ++k)
          for (int t = 0; t < nt; ++t)
            y[static_cast<size_t>(t0 + t) * y_stride + r + k] = v[k][t] + (bias ? bias[r + k] : 0.0f);
        r += nr;
      }
    }
  }
}

}  // namespace
#endif  // KVLM_X86

float dot_bf16(const uint16_t* w, const float* x, int n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return dot_avx2<false>(w, x, n);
#endif
  return scalar::dot_bf16(w, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return dot_avx2<true>(w, x, n);  // the Avx2 row includes F16C
#endif
  return scalar::dot_f16(w, x, n);
}

void half_rows_times_tokens(DType fmt, const uint16_t* w, const float* bias, int in, int r0, int r1, const float* x,
                            int n, float* y, int y_stride) {
  const bool f16 = fmt == DType::F16;
#if KVLM_X86
  if (isa_at_least(Isa::Avx2))
    return f16 ? rows_times_tokens_avx2<true>(w, bias, in, r0, r1, x, n, y, y_stride)
               : rows_times_tokens_avx2<false>(w, bias, in, r0, r1, x, n, y, y_stride);
#endif
  for (int r = r0; r < r1; ++r)
    for (int t = 0; t < n; ++t) {
      const uint16_t* wr = w + static_cast<size_t>(r) * in;
      const float* xt = x + static_cast<size_t>(t) * in;
      y[static_cast<size_t>(t) * y_stride + r] =
          (f16 ? scalar::dot_f16(wr, xt, in) : scalar::dot_bf16(wr, xt, in)) + (bias ? bias[r] : 0.0f);
    }
}

}  // namespace kvlm
