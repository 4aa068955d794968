#include "kernels/attention_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/kv_quant.h"
#include "kernels/prefetch.h"

#if KVLM_X86
#include "kernels/avx512_intrinsics.h"
#endif

namespace kvlm {

namespace {

// Denormals to signed zero: the instruction's inputs (DAZ) and results (FTZ).
inline float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
// One of the instruction's two steps: the product of two bf16 values is exact in f32.
inline float dp_step(float acc, float a, float b) { return flush(std::fma(flush(a), flush(b), flush(acc))); }

// Head h's first element of row 0 of the encoded rows, and the elements from one row to the next.
const uint16_t* head_rows(const EncodedRows& r) {
  return reinterpret_cast<const uint16_t*>(r.data) + static_cast<size_t>(r.h) * r.codec->head_dim;
}
size_t row_stride(const EncodedRows& r) { return r.codec->data_bytes() / 2; }

}  // namespace

uint16_t round_bf16(float x) { return f32_to_bf16(flush(x)); }

void round_query_bf16(const float* q, int n, uint16_t* out) {
  for (int i = 0; i < n; ++i) out[i] = round_bf16(q[i]);
}

namespace scalar {

void attn_scores_bf16(const uint16_t* qb, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                      size_t s_stride) {
  const uint16_t* kr = head_rows(k);
  const size_t stride = row_stride(k);
  for (int i = 0; i < g; ++i)
    for (int j = 0; j < n; ++j) {
      const uint16_t* q = qb + static_cast<size_t>(i) * hd;
      const uint16_t* key = kr + j * stride;
      float acc = 0.0f;
      for (int d = 0; d < hd; d += 2) {
        acc = dp_step(acc, bf16_to_f32(key[d + 1]), bf16_to_f32(q[d + 1]));
        acc = dp_step(acc, bf16_to_f32(key[d]), bf16_to_f32(q[d]));
      }
      s[i * s_stride + j] = acc * scale;
    }
}

void attn_accumulate_bf16(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n) {
  const uint16_t* vr = head_rows(v);
  const size_t stride = row_stride(v);
  for (int i = 0; i < st.g; ++i) {
    float* acc = st.acc + static_cast<size_t>(i) * st.hd;
    for (int j = 0; j < n; ++j) {
      const float w = bf16_to_f32(round_bf16(p[i * p_stride + j]));
      for (int d = 0; d < st.hd; ++d) acc[d] = dp_step(acc[d], bf16_to_f32(vr[j * stride + d]), w);
    }
  }
}

}  // namespace scalar

#if KVLM_X86
namespace {

#if KVLM_AVX512_EMULATION
#define KVLM_BF16 __attribute__((target(KVLM_AVX512_TARGET)))
#else
#define KVLM_BF16 __attribute__((target(KVLM_AVX512_TARGET ",avx512bf16")))
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // as attention_avx512.cpp
#endif

// Rows asked for this many keys ahead (one block of scores), on top of attention_batch.cpp's whole
// rows a piece ahead: TinyLlama-shaped at 16K positions, none ran 7% slower than 32 or 64 ahead,
// and 128 ahead 16% slower than 16.
constexpr int kAhead = 16;

KVLM_BF16 inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

// One stage of a 16 x 16 transpose of dwords: swaps bit `b` of the row and of the lane index
// between rows x and x + b (x with that bit clear). Four stages (8, 4, 2, 1) transpose.
template <int B>
KVLM_BF16 inline void transpose_stage(__m512i* r) {
  int lo[16], hi[16];
  for (int c = 0; c < 16; ++c) {
    lo[c] = (c & B) ? 16 + c - B : c;  // row x keeps its lanes with the bit clear, takes row x + b's below them
    hi[c] = (c & B) ? 16 + c : c + B;
  }
  const __m512i il = _mm512_loadu_si512(lo), ih = _mm512_loadu_si512(hi);
  for (int x = 0; x < 16; ++x)
    if (!(x & B)) {
      const __m512i a = r[x], b = r[x + B];
      r[x] = _mm512_permutex2var_epi32(a, il, b);
      r[x + B] = _mm512_permutex2var_epi32(a, ih, b);
    }
}

// The scores of 16 keys (t: their pairs of elements transposed, t[d] = pair d of each key) for
// H heads from head i: one accumulator per head, each pair of the heads' query broadcast.
template <int H>
KVLM_BF16 inline void heads_of_block(const uint32_t (*t)[16], const uint16_t* qb, int hd, __m512 sc, float* s,
                                     size_t s_stride, int m) {
  __m512 acc[H];
  for (int i = 0; i < H; ++i) acc[i] = _mm512_set1_ps(0.0f);
  for (int d = 0; d < hd / 2; ++d) {
    const __m512i kd = _mm512_loadu_si512(t[d]);
    for (int i = 0; i < H; ++i) {
      int qd;  // head i's pair d of query elements
      std::memcpy(&qd, qb + static_cast<size_t>(i) * hd + 2 * d, 4);
      acc[i] = dp(acc[i], kd, _mm512_set1_epi32(qd));
    }
  }
  for (int i = 0; i < H; ++i) {
    const __m512 out = _mm512_mul_ps(acc[i], sc);
    if (m == 16) {
      _mm512_storeu_ps(s + i * s_stride, out);
    } else {
      alignas(64) float tmp[16];
      _mm512_storeu_ps(tmp, out);
      std::memcpy(s + i * s_stride, tmp, m * sizeof(float));
    }
  }
}

// Scores of 16 keys at a time: the keys' pairs of elements transposed so that a vector holds one
// pair of 16 keys, then every head's query pairs broadcast against them: no horizontal sums.
KVLM_BF16 void scores_avx512(const uint16_t* qb, int g, int hd, float scale, const uint16_t* k, size_t stride, int n,
                             float* s, size_t s_stride) {
  alignas(64) uint32_t t[128][16];  // [pair][key], pairs up to hd 256
  const __m512 sc = _mm512_set1_ps(scale);
  for (int j = 0; j < n; j += 16) {
    const int m = std::min(16, n - j);
    for (int c = 0; c < hd / 2; c += 16) {  // 32 elements (16 pairs) of the 16 keys at a time
      __m512i r[16];
      for (int x = 0; x < 16; ++x) prefetch_bytes(k + (j + kAhead + x) * stride + 2 * c, 64);
      for (int x = 0; x < 16; ++x)
        r[x] = x < m ? _mm512_loadu_si512(k + (j + x) * stride + 2 * c) : _mm512_setzero_si512();
      transpose_stage<8>(r), transpose_stage<4>(r), transpose_stage<2>(r), transpose_stage<1>(r);
      for (int x = 0; x < 16; ++x) _mm512_storeu_si512(t[c + x], r[x]);
    }
    int i = 0;
    for (; i + 8 <= g; i += 8)
      heads_of_block<8>(t, qb + static_cast<size_t>(i) * hd, hd, sc, s + i * s_stride + j, s_stride, m);
    for (; i < g; ++i)
      heads_of_block<1>(t, qb + static_cast<size_t>(i) * hd, hd, sc, s + i * s_stride + j, s_stride, m);
  }
}

// Value sums of H heads, hd / 16 vectors each, two keys at a time: a vector holds 16 elements of
// keys j and j + 1 interleaved (key j's in the upper half of each dword, which the instruction
// adds first), against each head's pair of weights broadcast.
template <int C, int H>
KVLM_BF16 void values_avx512(float* acc, const float* p, size_t p_stride, const uint16_t* v, size_t stride, int n) {
  __m512 a[H][C];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) a[h][c] = _mm512_loadu_ps(acc + (h * C + c) * 16);
  // Word indices interleaving 32 elements of rows j + 1 (first operand) and j (second, +32):
  // elements 0-15 by ilo, 16-31 by ihi, row j's in the upper half of each dword.
  uint16_t lo16[32], hi16[32];
  for (int e = 0; e < 16; ++e) {
    lo16[2 * e] = static_cast<uint16_t>(e), lo16[2 * e + 1] = static_cast<uint16_t>(32 + e);
    hi16[2 * e] = static_cast<uint16_t>(16 + e), hi16[2 * e + 1] = static_cast<uint16_t>(48 + e);
  }
  const __m512i ilo = _mm512_loadu_si512(lo16), ihi = _mm512_loadu_si512(hi16);
  alignas(64) uint32_t w[H][16];  // [head][pair]: bf16(p_j) << 16 | bf16(p_j+1)
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int m = std::min(32, n - j0);
    for (int h = 0; h < H; ++h) {
      alignas(64) float pw[32] = {};
      std::memcpy(pw, p + h * p_stride + j0, m * sizeof(float));
      const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(pw + 16), _mm512_loadu_ps(pw));
      _mm512_storeu_si512(w[h], _mm512_rol_epi32(b, 16));
    }
    for (int j = 0; j < m; j += 2) {
      const uint16_t* r0 = v + (j0 + j) * stride;
      const uint16_t* r1 = j + 1 < m ? r0 + stride : nullptr;  // an odd last key: paired with a zero weight
      prefetch_bytes(r0 + kAhead * stride, 32 * C), prefetch_bytes(r0 + (kAhead + 1) * stride, 32 * C);
      __m512i kv[C];
      for (int c = 0; c < C; c += 2) {
        const __m512i x0 = _mm512_loadu_si512(r0 + 16 * c);
        const __m512i x1 = r1 ? _mm512_loadu_si512(r1 + 16 * c) : _mm512_setzero_si512();
        kv[c] = _mm512_permutex2var_epi16(x1, ilo, x0);
        kv[c + 1] = _mm512_permutex2var_epi16(x1, ihi, x0);
      }
      for (int h = 0; h < H; ++h) {
        const __m512i wp = _mm512_set1_epi32(static_cast<int>(w[h][j / 2]));
        for (int c = 0; c < C; ++c) a[h][c] = dp(a[h][c], kv[c], wp);
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + (h * C + c) * 16, a[h][c]);
}

using ValuesFn = void (*)(float*, const float*, size_t, const uint16_t*, size_t, int);
// [C / 2 - 1]: C = hd / 16 vectors a head; a tile of 16 / C heads (at least one), and one head.
constexpr ValuesFn kValueTiles[8][2] = {
    {values_avx512<2, 8>, values_avx512<2, 1>},   {values_avx512<4, 4>, values_avx512<4, 1>},
    {values_avx512<6, 2>, values_avx512<6, 1>},   {values_avx512<8, 2>, values_avx512<8, 1>},
    {values_avx512<10, 1>, values_avx512<10, 1>}, {values_avx512<12, 1>, values_avx512<12, 1>},
    {values_avx512<14, 1>, values_avx512<14, 1>}, {values_avx512<16, 1>, values_avx512<16, 1>}};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace
#endif

namespace {
// Whether the SIMD kernels can read these rows on this thread: bf16, head sizes of 32s up to 256,
// the avx512 row on a CPU with avx512_bf16.
bool simd_reads(const KvRowCodec& c) {
#if KVLM_X86
  return c.dtype == DType::BF16 && c.head_dim % 32 == 0 && c.head_dim <= 256 && isa_at_least(Isa::Avx512) &&
         cpu_features().avx512_bf16;
#else
  (void)c;
  return false;
#endif
}
}  // namespace

bool bf16_products_vectorized(const KvRowCodec& c) { return simd_reads(c); }

bool bf16_products(const KvRowCodec& c, int group) { return group >= 4 && simd_reads(c) && !cpu_features().intel; }

void attn_scores_bf16(const uint16_t* qb, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                      size_t s_stride) {
  KVLM_CHECK(k.codec->dtype == DType::BF16 && k.codec->head_dim == hd, "bf16 scores of other rows");
#if KVLM_X86
  if (simd_reads(*k.codec)) return scores_avx512(qb, g, hd, scale, head_rows(k), row_stride(k), n, s, s_stride);
#endif
  scalar::attn_scores_bf16(qb, g, hd, scale, k, n, s, s_stride);
}

void attn_accumulate_bf16(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n) {
  KVLM_CHECK(v.codec->dtype == DType::BF16 && v.codec->head_dim == st.hd, "bf16 value sums of other rows");
#if KVLM_X86
  if (simd_reads(*v.codec)) {
    const int C = st.hd / 16, H = std::max(1, 16 / C);  // 16 accumulators (hd 256: one head of 16)
    for (int i = 0; i < st.g;) {
      const bool tile = i + H <= st.g;  // H heads at once, the rest one by one
      kValueTiles[C / 2 - 1][tile ? 0 : 1](st.acc + static_cast<size_t>(i) * st.hd, p + i * p_stride, p_stride,
                                           head_rows(v), row_stride(v), n);
      i += tile ? H : 1;
    }
    return;
  }
#endif
  scalar::attn_accumulate_bf16(st, p, p_stride, v, n);
}

}  // namespace kvlm
