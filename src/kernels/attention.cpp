#include "kernels/attention.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_rows.h"
#include "core/cpu.h"
#include "kernels/dot.h"
#include "kernels/hsum.h"
#include "kernels/prefetch.h"
#include "kernels/vexp.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace kvlm {

void AttnState::reset() {
  std::fill(m, m + g, -std::numeric_limits<float>::infinity());
  std::fill(l, l + g, 0.0f);
  std::fill(acc, acc + static_cast<size_t>(g) * hd, 0.0f);
}

#if KVLM_X86
namespace {

// A head's keys (and values) are rows a whole KV row apart: a strided stream the hardware
// prefetcher followed poorly (at 16K positions the first load of each key took 80% of the score
// time). Rows kAhead keys ahead are asked for explicitly; a group's value sums of encoded rows
// ask kValueAhead ahead (their first heads' pass through a block waited on rows 8 ahead: 32 ran
// bf16 decode attention at 16K 8% faster; 24-40 were alike, 48-64 slower; f32 rows ran 1-4%
// slower with it, one head per KV head 5-9%).
constexpr int kAhead = 8, kValueAhead = 32;

KVLM_AVX2 float dot_avx2(const float* a, const float* b, int n) {
  int i = 0;
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum8_avx2(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Four dot products at once, reduced together: [a0, a1, a2, a3] summed lane-wise.
KVLM_AVX2 inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Eight at once with the same tree per vector as reduce4: [a0 .. a7] summed lane-wise.
KVLM_AVX2 inline __m256 reduce8(const __m256* a) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// Eight heads' dot products with key j (lanes = heads), as reduce8 sums them.
template <class Rows>
KVLM_AVX2 inline __m256 heads8(const float* q0, int hd, const Rows& k, int j) {
  __m256 a[8];
  for (int x = 0; x < 8; ++x) a[x] = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    const __m256 kv = k.load8(j, d);
    for (int x = 0; x < 8; ++x) a[x] = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + x * hd + d), kv, a[x]);
  }
  return reduce8(a);
}

// One dot product with reduce4's summation tree, so a key's score does not depend on whether it
// was computed in a batch of four (runs of the cache split batches differently by layout).
template <class Rows>
KVLM_AVX2 inline float dot_tree(const float* a, const Rows& b, int j, int hd) {
  __m256 acc = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), b.load8(j, d), acc);
  const __m256 z = _mm256_setzero_ps();
  return _mm_cvtss_f32(reduce4(acc, z, z, z));
}

// Scores of keys [0, n - n % 8) for g % 8 == 0 heads, eight keys by eight heads at a time; returns
// the keys done. HD > 0 is hd known at compile time: with the loops unrolled, TinyLlama-shaped
// decode attention at 16K ran 7% faster for f32 rows and 5% for bf16 (0: hd read at run time).
template <int HD, class Rows>
KVLM_AVX2 inline int scores_keys8(const float* q, int g, int hd, float scale, const Rows& k, int n,
                                                            float* s, size_t s_stride) {
  if (HD) hd = HD;
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int i = 0; i < g; i += 8) {
      __m256 t[8];  // t[y]: key j + y's scores of heads i..i+7
      const float* qi = q + static_cast<size_t>(i) * hd;
      for (int y = 0; y < 8; ++y) {
        if (i == 0) k.prefetch(j + y + kAhead, hd);
        t[y] = _mm256_mul_ps(heads8(qi, hd, k, j + y), _mm256_set1_ps(scale));
      }
      transpose8(t);  // t[x]: head i + x's scores of keys j..j+7, stored as one run
      for (int x = 0; x < 8; ++x) _mm256_storeu_ps(s + (i + x) * s_stride + j, t[x]);
    }
  return j;
}

// As scores_keys8 for g % 8 != 0 (g >= 4): heads four at a time by pairs of keys, eight chains
// of multiply-adds where one key's four heads had four (a chain's latency then bounded them:
// Llama-3-shaped groups of four at a head size of 128 spent half again as long per
// multiply-add as groups of eight); the g % 4 heads left over key by key.
template <int HD, class Rows>
KVLM_AVX2 inline int scores_keys8_quads(const float* q, int g, int hd, float scale, const Rows& k,
                                                                  int n, float* s, size_t s_stride) {
  if (HD) hd = HD;
  const __m256 sc = _mm256_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    int i = 0;
    for (; i + 4 <= g; i += 4) {
      const float* qi = q + static_cast<size_t>(i) * hd;
      __m256 r[4];  // r[p]: keys j + 2p and j + 2p + 1, each its four heads' scores
      for (int p = 0; p < 4; ++p) {
        if (i == 0) k.prefetch(j + 2 * p + kAhead, hd), k.prefetch(j + 2 * p + 1 + kAhead, hd);
        __m256 a[8];  // heads 0-3 of key j + 2p, then of key j + 2p + 1
        for (int x = 0; x < 8; ++x) a[x] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
          const __m256 k0 = k.load8(j + 2 * p, d), k1 = k.load8(j + 2 * p + 1, d);
          for (int x = 0; x < 4; ++x) {
            const __m256 qv = _mm256_loadu_ps(qi + x * hd + d);
            a[x] = _mm256_fmadd_ps(qv, k0, a[x]);
            a[4 + x] = _mm256_fmadd_ps(qv, k1, a[4 + x]);
          }
        }
        r[p] = _mm256_mul_ps(reduce8(a), sc);
      }
      // Eight keys of four heads to four heads of eight keys: halves regrouped as keys (0,4),
      // (1,5), (2,6), (3,7), then a 4x4 transpose within each half.
      const __m256 a04 = _mm256_permute2f128_ps(r[0], r[2], 0x20), a15 = _mm256_permute2f128_ps(r[0], r[2], 0x31);
      const __m256 a26 = _mm256_permute2f128_ps(r[1], r[3], 0x20), a37 = _mm256_permute2f128_ps(r[1], r[3], 0x31);
      const __m256 t0 = _mm256_unpacklo_ps(a04, a15), t1 = _mm256_unpackhi_ps(a04, a15);
      const __m256 t2 = _mm256_unpacklo_ps(a26, a37), t3 = _mm256_unpackhi_ps(a26, a37);
      _mm256_storeu_ps(s + i * s_stride + j, _mm256_shuffle_ps(t0, t2, 0x44));
      _mm256_storeu_ps(s + (i + 1) * s_stride + j, _mm256_shuffle_ps(t0, t2, 0xEE));
      _mm256_storeu_ps(s + (i + 2) * s_stride + j, _mm256_shuffle_ps(t1, t3, 0x44));
      _mm256_storeu_ps(s + (i + 3) * s_stride + j, _mm256_shuffle_ps(t1, t3, 0xEE));
    }
    for (; i < g; ++i)
      for (int y = 0; y < 8; ++y) s[i * s_stride + j + y] = dot_tree(q + static_cast<size_t>(i) * hd, k, j + y, hd) * scale;
  }
  return j;
}

// The blocks of eight keys for a group of 4+ heads: by eights or by fours.
template <int HD, class Rows>
KVLM_AVX2 inline int scores_blocks(const float* q, int g, int hd, float scale, const Rows& k, int n,
                                                             float* s, size_t s_stride) {
  if (const int done = avx512::scores_key_pairs(q, g, hd, scale, k, n, s, s_stride)) return done;
  return g % 8 == 0 ? scores_keys8<HD>(q, g, hd, scale, k, n, s, s_stride) : scores_keys8_quads<HD>(q, g, hd, scale, k, n, s, s_stride);
}

// hd % 8 == 0 here; f32 rows of other sizes go through scores_f32_any.
template <class Rows>
KVLM_AVX2 void scores_avx2(const float* q, int g, int hd, float scale, const Rows& k, int n,
                                                      float* s, size_t s_stride) {
  const __m128 sc = _mm_set1_ps(scale);
  alignas(16) float r[4];
  if (g >= 4) {  // GQA: blocks of eight keys by eight (or four) query heads, then key by key
    int j = 0;
    switch (hd) {  // the common head sizes with their loops unrolled
      case 64: j = scores_blocks<64>(q, g, hd, scale, k, n, s, s_stride); break;
      case 128: j = scores_blocks<128>(q, g, hd, scale, k, n, s, s_stride); break;
      default: j = scores_blocks<0>(q, g, hd, scale, k, n, s, s_stride); break;
    }
    for (; j < n; ++j) {
      k.prefetch(j + kAhead, hd);
      int i = 0;
      for (; i + 8 <= g; i += 8) {  // each element of the key loaded (and widened) once for eight heads
        alignas(32) float r8[8];
        _mm256_store_ps(r8, _mm256_mul_ps(heads8(q + static_cast<size_t>(i) * hd, hd, k, j), _mm256_set1_ps(scale)));
        for (int x = 0; x < 8; ++x) s[(i + x) * s_stride + j] = r8[x];
      }
      for (; i + 4 <= g; i += 4) {
        const float* q0 = q + static_cast<size_t>(i) * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d += 8) {
          const __m256 kv = k.load8(j, d);
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), kv, a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + hd + d), kv, a1);
          a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * hd + d), kv, a2);
          a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * hd + d), kv, a3);
        }
        _mm_store_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), sc));
        for (int x = 0; x < 4; ++x) s[(i + x) * s_stride + j] = r[x];
      }
      for (; i < g; ++i) s[i * s_stride + j] = dot_tree(q + static_cast<size_t>(i) * hd, k, j, hd) * scale;
    }
    return;
  }
  for (int i = 0; i < g; ++i) {  // few heads: four keys per query head
    const float* qi = q + static_cast<size_t>(i) * hd;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      if (i == 0)
        for (int x = 0; x < 4; ++x) k.prefetch(j + kAhead + x, hd);
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qi + d);
        a0 = _mm256_fmadd_ps(qv, k.load8(j, d), a0);
        a1 = _mm256_fmadd_ps(qv, k.load8(j + 1, d), a1);
        a2 = _mm256_fmadd_ps(qv, k.load8(j + 2, d), a2);
        a3 = _mm256_fmadd_ps(qv, k.load8(j + 3, d), a3);
      }
      _mm_storeu_ps(s + i * s_stride + j, _mm_mul_ps(reduce4(a0, a1, a2, a3), sc));
    }
    for (; j < n; ++j) s[i * s_stride + j] = dot_tree(qi, k, j, hd) * scale;
  }
}

// f32 rows whose head size is not a multiple of 8.
KVLM_AVX2 void scores_f32_any(const float* q, int g, int hd, float scale, const float* k,
                                                         size_t stride, int n, float* s, size_t s_stride) {
  for (int i = 0; i < g; ++i)
    for (int j = 0; j < n; ++j) s[i * s_stride + j] = dot_avx2(q + static_cast<size_t>(i) * hd, k + j * stride, hd) * scale;
}

// Value sums of H heads' elements [d, d + 8S) over keys [j0, j1): the tile of accumulators stays
// in registers across the keys, and each value row's slice is read (and widened) once per H heads.
// One head (H = 1) keeps a whole head of up to 128 in registers; a GQA group takes tiles of four
// heads by three slices (12 + 3 + 1 of AVX2's 16 registers), so a multiply-add needs 7 / 12 loads,
// not the 9 / 8 of one head at a time. Per element the keys are summed in order, as the twin does.
// What a value tile asks for ahead: nothing, the whole row kAhead keys on, or its own slice of
// the row kValueAhead keys on.
enum class Ask { None, Row, Slice };
template <int H, int S, Ask A, int HD = 0, class Rows>
KVLM_AVX2 void accumulate_tile(float* acc, int hd, const float* p, size_t p_stride, const Rows& v,
                                                          int d, int j0, int j1) {
  if (j0 >= j1) return;  // with a loop that might not run, GCC stored every accumulator each key
  __m256 a[H * S];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < S; ++c) a[h * S + c] = _mm256_loadu_ps(acc + static_cast<size_t>(h) * hd + d + 8 * c);
  int j = j0;
  do {
    if constexpr (A == Ask::Row && HD > 0) prefetch_span<HD * Rows::kBits / 8>(v.at(j + kAhead, 0));
    else if (A == Ask::Row) v.prefetch(j + kAhead, hd);  // GCC keeps the accumulators in memory around this loop
    if (A == Ask::Slice) prefetch_span<S * Rows::kBits>(v.at(j + kValueAhead, d));  // 8S elements
    __m256 vv[S];
    for (int c = 0; c < S; ++c) vv[c] = v.load8(j, d + 8 * c);
    for (int h = 0; h < H; ++h) {
      const __m256 w = _mm256_broadcast_ss(p + h * p_stride + j);
      for (int c = 0; c < S; ++c) a[h * S + c] = _mm256_fmadd_ps(w, vv[c], a[h * S + c]);
    }
  } while (++j < j1);
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < S; ++c) _mm256_storeu_ps(acc + static_cast<size_t>(h) * hd + d + 8 * c, a[h * S + c]);
}

// Elements [0, hd - hd % 8) of heads [first, g); the caller adds the rest. Keys are taken kBlock
// at a time, every head over each block: a block of rows (8 KiB of f32 at a head size of 64)
// stays in L1 for the group's heads, where a whole span (32 KiB) came from L2 once per head.
// Per element the keys are still summed in order.
constexpr int kBlock = 32;
template <class Rows>
KVLM_AVX2 void accumulate_avx2(AttnState& st, const float* p, size_t p_stride, const Rows& v, int n,
                                                          int first = 0) {
  const int hd = st.hd;
  for (int j0 = 0; j0 < n; j0 += kBlock) {
    const int j1 = std::min(n, j0 + kBlock);
    for (int i = first; i < st.g; ++i) {
      float* acc = st.acc + static_cast<size_t>(i) * hd;
      const float* pi = p + i * p_stride;
      const bool lead = i == first;  // the first head's pass brings the rows in
      switch (hd) {  // the common head sizes
        case 64:
          lead ? accumulate_tile<1, 8, Ask::Row, 64>(acc, hd, pi, 0, v, 0, j0, j1) : accumulate_tile<1, 8, Ask::None>(acc, hd, pi, 0, v, 0, j0, j1);
          continue;
        case 128:
          lead ? accumulate_tile<1, 16, Ask::Row, 128>(acc, hd, pi, 0, v, 0, j0, j1) : accumulate_tile<1, 16, Ask::None>(acc, hd, pi, 0, v, 0, j0, j1);
          continue;
        case 32: accumulate_tile<1, 4, Ask::None>(acc, hd, pi, 0, v, 0, j0, j1); continue;
        case 16: accumulate_tile<1, 2, Ask::None>(acc, hd, pi, 0, v, 0, j0, j1); continue;
        case 8: accumulate_tile<1, 1, Ask::None>(acc, hd, pi, 0, v, 0, j0, j1); continue;
        default: break;
      }
      for (int d = 0; d + 8 <= hd; d += 8) accumulate_tile<1, 1, Ask::None>(acc, hd, pi, 0, v, d, j0, j1);
    }
  }
}

// Slices [0, hd) of H heads from acc, three at a time, then two and one. Asking ahead (A): the
// first tile for the whole rows (Row), or every tile for its slice (Slice). HD > 0: hd known at
// compile time (the Row tile's requests then need no loop, around which GCC stored its twelve
// accumulators every key: f32 value sums in L1 a quarter faster).
template <int H, Ask A, int HD = 0, class Rows>
KVLM_AVX2 void accumulate_heads_avx2(float* acc, int hd, const float* p, size_t p_stride,
                                                                const Rows& v, int j0, int j1) {
  constexpr Ask rest = A == Ask::Slice ? Ask::Slice : Ask::None;
  if (HD) hd = HD;
  int d = 0;
  if (hd >= 24) accumulate_tile<H, 3, A, HD>(acc, hd, p, p_stride, v, 0, j0, j1), d = 24;
  for (; d + 24 <= hd; d += 24) accumulate_tile<H, 3, rest>(acc, hd, p, p_stride, v, d, j0, j1);
  for (; d + 16 <= hd; d += 16) accumulate_tile<H, 2, rest>(acc, hd, p, p_stride, v, d, j0, j1);
  for (; d < hd; d += 8) accumulate_tile<H, 1, rest>(acc, hd, p, p_stride, v, d, j0, j1);
}

// Heads [first, g) of a group (hd % 8 == 0), four at a time, kBlock keys at a time. The first
// four ask for the rows ahead: encoded ones by slices kValueAhead on, f32 ones whole kAhead on
// (by slices they measured 1-4% slower).
template <class Rows>
KVLM_AVX2 void accumulate_group_avx2(AttnState& st, const float* p, size_t p_stride, const Rows& v,
                                                                int n, int first) {
  constexpr Ask kLead = std::is_same_v<Rows, F32Rows> ? Ask::Row : Ask::Slice;
  const int hd = st.hd;
  for (int j0 = 0; j0 < n; j0 += kBlock) {
    const int j1 = std::min(n, j0 + kBlock);
    int i = first;
    for (; i + 4 <= st.g; i += 4) {
      float* acc = st.acc + static_cast<size_t>(i) * hd;
      const float* pi = p + i * p_stride;
      if (i != first) accumulate_heads_avx2<4, Ask::None>(acc, hd, pi, p_stride, v, j0, j1);
      else if (hd == 64) accumulate_heads_avx2<4, kLead, 64>(acc, hd, pi, p_stride, v, j0, j1);
      else if (hd == 128) accumulate_heads_avx2<4, kLead, 128>(acc, hd, pi, p_stride, v, j0, j1);
      else accumulate_heads_avx2<4, kLead>(acc, hd, pi, p_stride, v, j0, j1);
    }
    for (; i < st.g; ++i) accumulate_heads_avx2<1, Ask::None>(st.acc + static_cast<size_t>(i) * hd, hd, p + i * p_stride, p_stride, v, j0, j1);
  }
}

// The span's max and sum, 8 lanes at a time (the max's whole 16s by avx512::max_blocks where
// the CPU has it): a serial sum of 128 scores was a chain of 128 dependent adds, a fifth of a
// long-context step. The lanes are summed in a fixed order.
KVLM_AVX2 float max_avx2(const float* s, int n) {
  float wide = -std::numeric_limits<float>::infinity();
  int j = avx512::max_blocks(s, n, wide);
  __m256 m = _mm256_set1_ps(wide);
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
  alignas(32) float t[8];
  _mm256_store_ps(t, m);
  float r = t[0];
  for (int x = 1; x < 8; ++x) r = std::max(r, t[x]);
  for (; j < n; ++j) r = std::max(r, s[j]);
  return r;
}
// exp(s - mx) in place and its sum: eight lanes summed in key order, then reduce4's tree, then
// the tail one at a time. The same sum as adding the exponentials afterwards in a second pass.
KVLM_AVX2 float exp_minus_sum_avx2(float* s, int n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  alignas(32) float sum8[8] = {};
  int j = avx512::exp_minus_blocks(s, n, mx, sum8);  // 16 lanes where the CPU has them, the same values
  __m256 a = _mm256_load_ps(sum8);
  for (; j + 32 <= n; j += 32) {
    __m256 e[4];
    for (int k = 0; k < 4; ++k) e[k] = _mm256_sub_ps(_mm256_loadu_ps(s + j + 8 * k), m);
    exp8xk_nonpositive_avx2<4>(e);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(s + j + 8 * k, e[k]), a = _mm256_add_ps(a, e[k]);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8_nonpositive_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    a = _mm256_add_ps(a, e);
  }
  const __m256 z = _mm256_setzero_ps();
  float r = _mm_cvtss_f32(reduce4(a, z, z, z));
  if (j == n) return r;
  alignas(32) float t[8] = {};
  std::copy(s + j, s + n, t);
  _mm256_store_ps(t, exp8_nonpositive_avx2(_mm256_sub_ps(_mm256_load_ps(t), m)));
  for (int x = 0; x < n - j; ++x) s[j + x] = t[x], r += t[x];
  return r;
}

// A head's running state rescaled by corr (the same products as one at a time).
KVLM_AVX2 void scale_avx2(float* acc, int hd, float corr) {
  const __m256 c = _mm256_set1_ps(corr);
  int d = 0;
  for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), c));
  for (; d < hd; ++d) acc[d] *= corr;
}

}  // namespace
#endif  // KVLM_X86

namespace scalar {
void attn_scores(const float* q, int g, int hd, float scale, const float* k, size_t stride, int n, float* s,
                 size_t s_stride) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < g; ++i) {
      float d = 0.0f;
      for (int x = 0; x < hd; ++x) d += q[static_cast<size_t>(i) * hd + x] * k[j * stride + x];
      s[i * s_stride + j] = d * scale;
    }
}
void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < st.g; ++i)
      for (int d = 0; d < st.hd; ++d) st.acc[static_cast<size_t>(i) * st.hd + d] += p[i * p_stride + j] * v[j * stride + d];
}
}  // namespace scalar

void attn_scores(const float* q, int g, int hd, float scale, const float* k, size_t stride, int n, float* s,
                 size_t s_stride) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) {
    if (hd % 8 == 0) return scores_avx2(q, g, hd, scale, F32Rows{k, stride}, n, s, s_stride);
    return scores_f32_any(q, g, hd, scale, k, stride, n, s, s_stride);
  }
#endif
  scalar::attn_scores(q, g, hd, scale, k, stride, n, s, s_stride);
}

void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) {
    const int first = avx512::accumulate_f32_heads(st, p, p_stride, v, stride, n);  // heads by fours, where it can
    if (st.g - first >= 4 && st.hd % 8 == 0) accumulate_group_avx2(st, p, p_stride, F32Rows{v, stride}, n, first);
    else accumulate_avx2(st, p, p_stride, F32Rows{v, stride}, n, first);
    for (int d = st.hd - st.hd % 8; d < st.hd; ++d)
      for (int i = 0; i < st.g; ++i)
        for (int j = 0; j < n; ++j) st.acc[static_cast<size_t>(i) * st.hd + d] += p[i * p_stride + j] * v[j * stride + d];
    return;
  }
#endif
  scalar::attn_accumulate(st, p, p_stride, v, stride, n);
}

#if KVLM_X86
namespace {
// Calls fn(rows) with the reader of head h of the encoded rows (bf16 ones as Bf16), false where
// none fits (the head size is not a multiple of 8, or of 32 for int4).
template <class Bf16, class Fn>
bool with_encoded_rows(const EncodedRows& r, Fn&& fn) {
  const KvRowCodec& c = *r.codec;
  const int hd = c.head_dim;
  if (hd % 8 != 0 || !isa_at_least(Isa::Avx2)) return false;
  const size_t db = c.data_bytes(), pn = static_cast<size_t>(c.n_params());
  const uint8_t* data = r.data + c.head_data_offset(r.h);
  const float* params = r.params + c.head_param_offset(r.h);
  switch (c.dtype) {
    case DType::F16:
      fn(F16Rows{reinterpret_cast<const uint16_t*>(data), db / 2});
      return true;
    case DType::BF16:
      fn(Bf16{reinterpret_cast<const uint16_t*>(data), db / 2});
      return true;
    case DType::Int8:
      fn(Int8Rows{reinterpret_cast<const int8_t*>(data), db, params, pn});
      return true;
    case DType::Int4:
      if (hd % 32 != 0) return false;
      fn(Int4Rows{data, db, params, pn});
      return true;
    default: return false;
  }
}
}  // namespace
#endif

bool attn_scores_encoded(const float* q, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                         size_t s_stride) {
#if KVLM_X86
  return with_encoded_rows<Bf16Rows>(k, [&](const auto& rows) { scores_avx2(q, g, hd, scale, rows, n, s, s_stride); });
#else
  (void)q, (void)g, (void)hd, (void)scale, (void)k, (void)n, (void)s, (void)s_stride;
  return false;
#endif
}

bool attn_accumulate_encoded(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n) {
#if KVLM_X86
  if (st.g >= 4) {
    // A group's heads share each widened row: AVX-512 widens it once per four heads (f16, bf16, int8,
    // head sizes 64 and 128), AVX2 each slice once per tile of four heads (accumulate_tile).
    if (avx512::accumulate_encoded(st, p, p_stride, v, n)) return true;
    return with_encoded_rows<Bf16RowsNoMask>(v, [&](const auto& rows) { accumulate_group_avx2(st, p, p_stride, rows, n, 0); });
  }
  return with_encoded_rows<Bf16Rows>(v, [&](const auto& rows) { accumulate_avx2(st, p, p_stride, rows, n); });
#else
  (void)st, (void)p, (void)p_stride, (void)v, (void)n;
  return false;
#endif
}

void attn_update(AttnState& st, float* s, size_t s_stride, int n) {
  for (int i = 0; i < st.g; ++i) {
    float* si = s + i * s_stride;
    float mx = st.m[i], sum = 0.0f;
#if KVLM_X86
    const bool avx2 = isa_at_least(Isa::Avx2);
    if (avx2) {
      mx = std::max(mx, max_avx2(si, n));
      sum = exp_minus_sum_avx2(si, n, mx);
    } else
#endif
    {
      for (int j = 0; j < n; ++j) mx = std::max(mx, si[j]);
      for (int j = 0; j < n; ++j) si[j] = std::exp(si[j] - mx);
      for (int j = 0; j < n; ++j) sum += si[j];
    }
    const float corr = std::exp(st.m[i] - mx);  // exp(-inf) = 0 before the first span
    st.l[i] = st.l[i] * corr + sum;
    if (corr != 1.0f) {
      float* acc = st.acc + static_cast<size_t>(i) * st.hd;
#if KVLM_X86
      if (avx2) scale_avx2(acc, st.hd, corr);
      else
#endif
        for (int d = 0; d < st.hd; ++d) acc[d] *= corr;
    }
    st.m[i] = mx;
  }
}

void attn_finish(const AttnState& st, float* out, size_t out_stride, const float* sinks) {
  for (int i = 0; i < st.g; ++i) {
    // A sink adds exp(sink) to the denominator, in the state's units (weights relative to the
    // max m); relative to the sink instead where it is the larger, so no term overflows.
    float l = st.l[i], scale = 1.0f;
    if (sinks && sinks[i] > st.m[i]) {
      scale = std::exp(st.m[i] - sinks[i]);
      l = l * scale + 1.0f;
    } else if (sinks) {
      l += std::exp(sinks[i] - st.m[i]);
    }
    float inv = l > 0 ? scale / l : 0.0f;
    for (int d = 0; d < st.hd; ++d) out[i * out_stride + d] = st.acc[static_cast<size_t>(i) * st.hd + d] * inv;
  }
}

}  // namespace kvlm
