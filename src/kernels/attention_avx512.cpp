#include "kernels/attention_avx512.h"

#include <algorithm>
#include <cstring>

#include "core/cpu.h"
#include "kernels/prefetch.h"

#if KVLM_X86
#include "kernels/attention_rows.h"
#include "kernels/avx512_intrinsics.h"
#include "kernels/vexp.h"
#endif

namespace kvlm::avx512 {

#if KVLM_X86
namespace {

// As attention.cpp's AVX2 readers: rows 8 keys ahead are asked for.
constexpr int kAhead = 8;

#define KVLM_AVX512 __attribute__((target(KVLM_AVX512_TARGET)))
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through their masked builtins, which
// -W(maybe-)uninitialized reports once inlined; nothing is read uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
struct F32Rows16 {
  const float* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const { return _mm512_loadu_ps(p + j * stride + d); }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * sizeof(float)); }
};
struct Bf16Rows16 {
  const uint16_t* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * stride + d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * 2); }
};
struct F16Rows16 {
  const uint16_t* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * stride + d)));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * 2); }
};
struct Int8Rows16 {
  const int8_t* p;
  size_t stride;
  const float* scale;
  size_t pstride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride + d));
    return _mm512_mul_ps(_mm512_set1_ps(scale[j * pstride]), _mm512_cvtepi32_ps(_mm512_maskz_cvtepi8_epi32(0xFFFF, q)));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd); }
};

template <int C, class Rows>
KVLM_AVX512 void accumulate_heads_avx512(float* acc, const float* p, size_t p_stride, const Rows& v, int n) {
  constexpr int H = 16 / C;
  __m512 a[H][C];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) a[h][c] = _mm512_loadu_ps(acc + h * 16 * C + 16 * c);
  for (int j = 0; j < n; ++j) {
    v.prefetch(j + kAhead, 16 * C);
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = v.load16(j, 16 * c);
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * p_stride + j]);
      for (int c = 0; c < C; ++c) a[h][c] = _mm512_fmadd_ps(w, vv[c], a[h][c]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + h * 16 * C + 16 * c, a[h][c]);
}
// AVX2's _mm256_hadd_ps in each 256-bit half: per 128-bit block [a0+a1, a2+a3, b0+b1, b2+b3].
KVLM_AVX512 inline __m512 hadd_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
}

// attention.cpp's reduce8 in each 256-bit half: a[x] holds head x's lanes for key j (lower half)
// and key j + 1 (upper); returns [key j's eight heads | key j + 1's], each the same sums as reduce8.
KVLM_AVX512 inline __m512 reduce8_halves(const __m512* a) {
  const __m512 h0123 = hadd_halves(hadd_halves(a[0], a[1]), hadd_halves(a[2], a[3]));
  const __m512 h4567 = hadd_halves(hadd_halves(a[4], a[5]), hadd_halves(a[6], a[7]));
  // reduce8's permute2f128 pair within each half: its blocks (h0123's, h4567's) [0 | 2] and [1 | 3].
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  return _mm512_add_ps(_mm512_permutex2var_ps(h0123, lo, h4567), _mm512_permutex2var_ps(h0123, hi, h4567));
}

// Elements d..d+7 of keys a (lower half) and b (upper), widened as the AVX2 readers widen them.
template <class Rows>
KVLM_AVX512 inline __m512 two_keys(const Rows& k, int a, int b, int d) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(k.load8(a, d)), k.load8(b, d), 1);
}

// scores_keys8 on zmm (groups of 8s): per eight heads, keys j and j + 1 in one vector's halves,
// each head's query broadcast to both; reduced, scaled and transposed as scores_keys8 does.
template <int HD, class Rows>
KVLM_AVX512 int key_pairs(const float* q, int g, int hd, float scale, const Rows& k, int n, float* s, size_t s_stride) {
  if (HD) hd = HD;
  const __m512 sc = _mm512_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int i = 0; i < g; i += 8) {
      __m256 t[8];  // t[y]: key j + y's scores of heads i..i+7
      const float* qi = q + static_cast<size_t>(i) * hd;
      for (int y = 0; y < 8; y += 2) {
        if (i == 0) k.prefetch(j + y + kAhead, hd), k.prefetch(j + y + 1 + kAhead, hd);
        __m512 a[8];
        for (int x = 0; x < 8; ++x) a[x] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
          const __m512 kk = two_keys(k, j + y, j + y + 1, d);
          for (int x = 0; x < 8; ++x)
            a[x] = _mm512_fmadd_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(qi + x * hd + d)), kk, a[x]);
        }
        const __m512 r = _mm512_mul_ps(reduce8_halves(a), sc);
        t[y] = _mm512_castps512_ps256(r), t[y + 1] = _mm512_extractf32x8_ps(r, 1);
      }
      transpose8(t);  // t[x]: head i + x's scores of keys j..j+7
      for (int x = 0; x < 8; ++x) _mm256_storeu_ps(s + (i + x) * s_stride + j, t[x]);
    }
  return j;
}
// Groups that are not whole eights (four heads of Llama-3 or Mistral, seven of Qwen2): heads four
// at a time by eight keys, a zmm holding two keys of one head; heads past the group's last four
// are a copy padded with zeros. Each score is still scores_keys8's lanes and tree.
template <int HD, class Rows>
KVLM_AVX512 int key_quads(const float* q, int g, int hd, float scale, const Rows& k, int n, float* s, size_t s_stride) {
  if (HD) hd = HD;
  alignas(64) float pad[4 * 256];  // the last heads' query, zeros after them (hd <= 256)
  const int tail = g % 4;
  if (tail) {
    std::memset(pad, 0, sizeof(float) * 4 * hd);
    std::memcpy(pad, q + static_cast<size_t>(g - tail) * hd, sizeof(float) * tail * hd);
  }
  // Each four keys' scores come as heads 0-3 of key j, j + 1, j + 2, j + 3 (key j + m's head h in
  // lane 4m + h); a head's eight keys are gathered from two such: lanes h, 4 + h, .. 28 + h.
  const __m512i h01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i h23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  const __m512 sc = _mm512_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int i = 0; i < g; i += 4) {
      const float* qi = i + 4 <= g ? q + static_cast<size_t>(i) * hd : pad;
      if (i == 0)
        for (int y = 0; y < 8; ++y) k.prefetch(j + y + kAhead, hd);
      __m512 a[16];  // a[4c + x]: head x against kk[c]
      for (int x = 0; x < 16; ++x) a[x] = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        __m512 kk[4];  // kk[2b + p]: keys j + 4b + p (lower half) and j + 4b + p + 2 (upper)
        for (int b = 0; b < 2; ++b)
          for (int p = 0; p < 2; ++p)
            kk[2 * b + p] = two_keys(k, j + 4 * b + p, j + 4 * b + p + 2, d);
        for (int x = 0; x < 4; ++x) {
          const __m512 qx = _mm512_broadcast_f32x8(_mm256_loadu_ps(qi + x * hd + d));
          for (int c = 0; c < 4; ++c) a[4 * c + x] = _mm512_fmadd_ps(qx, kk[c], a[4 * c + x]);
        }
      }
      const __m512 r0 = _mm512_mul_ps(reduce8_halves(a), sc), r1 = _mm512_mul_ps(reduce8_halves(a + 8), sc);
      const __m512 s01 = _mm512_permutex2var_ps(r0, h01, r1), s23 = _mm512_permutex2var_ps(r0, h23, r1);
      const __m256 out[4] = {_mm512_castps512_ps256(s01), _mm512_extractf32x8_ps(s01, 1), _mm512_castps512_ps256(s23),
                             _mm512_extractf32x8_ps(s23, 1)};
      for (int x = 0; x < std::min(4, g - i); ++x) _mm256_storeu_ps(s + (i + x) * s_stride + j, out[x]);
    }
  return j;
}

// vexp.h's exp8_reduced on 16 lanes: the same operations, lane by lane.
template <int K>
KVLM_AVX512 inline void exp16_reduced(__m512* x, __m512* n) {
  __m512 r[K], p[K];
  for (int k = 0; k < K; ++k)
    n[k] = _mm512_roundscale_ps(_mm512_mul_ps(x[k], _mm512_set1_ps(ExpPoly::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  for (int k = 0; k < K; ++k) r[k] = _mm512_fnmadd_ps(n[k], _mm512_set1_ps(ExpPoly::kLn2Hi), x[k]);
  for (int k = 0; k < K; ++k) r[k] = _mm512_fnmadd_ps(n[k], _mm512_set1_ps(ExpPoly::kLn2Lo), r[k]);
  for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(_mm512_set1_ps(ExpPoly::kP[0]), r[k], _mm512_set1_ps(ExpPoly::kP[1]));
  for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(ExpPoly::kP[2]));
  for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(ExpPoly::kP[3]));
  for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(ExpPoly::kP[4]));
  for (int k = 0; k < K; ++k) p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(ExpPoly::kP[5]));
  for (int k = 0; k < K; ++k) x[k] = _mm512_fmadd_ps(p[k], _mm512_mul_ps(r[k], r[k]), _mm512_add_ps(r[k], _mm512_set1_ps(1.0f)));
}

// vexp.h's exp8xk_nonpositive_avx2 on 16 lanes, bit for bit (below the range 0, NaN stays NaN).
template <int K>
KVLM_AVX512 inline void exp16xk_nonpositive(__m512* x) {
  const __m512 lo = _mm512_set1_ps(ExpPoly::kLo);
  __mmask16 under[K];
  __m512 p[K], n[K];
  for (int k = 0; k < K; ++k) {
    under[k] = _mm512_cmp_ps_mask(x[k], lo, _CMP_LT_OQ);
    p[k] = _mm512_max_ps(lo, x[k]);
  }
  exp16_reduced<K>(p, n);
  for (int k = 0; k < K; ++k) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n[k]), _mm512_set1_epi32(127));
    x[k] = _mm512_maskz_mov_ps(static_cast<__mmask16>(~under[k]), _mm512_mul_ps(p[k], _mm512_castsi512_ps(_mm512_slli_epi32(e, 23))));
  }
}

// exp_minus_blocks (attention_avx512.h): 32 keys at a time, two vectors of 16 in flight.
KVLM_AVX512 int exp_blocks(float* s, int n, float mx, float* sum8) {
  const __m512 m = _mm512_set1_ps(mx);
  __m256 a = _mm256_loadu_ps(sum8);
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512 e[2];
    for (int k = 0; k < 2; ++k) e[k] = _mm512_sub_ps(_mm512_loadu_ps(s + j + 16 * k), m);
    exp16xk_nonpositive<2>(e);
    for (int k = 0; k < 2; ++k) {  // eight keys at a time into the sum, in key order
      _mm512_storeu_ps(s + j + 16 * k, e[k]);
      a = _mm256_add_ps(a, _mm512_castps512_ps256(e[k]));
      a = _mm256_add_ps(a, _mm512_extractf32x8_ps(e[k], 1));
    }
  }
  _mm256_storeu_ps(sum8, a);
  return j;
}

KVLM_AVX512 int max_in_blocks(const float* s, int n, float& mx) {
  __m512 m[4];
  for (auto& x : m) x = _mm512_set1_ps(mx);
  int j = 0;
  for (; j + 64 <= n; j += 64)
    for (int k = 0; k < 4; ++k) m[k] = _mm512_max_ps(m[k], _mm512_loadu_ps(s + j + 16 * k));
  for (; j + 16 <= n; j += 16) m[0] = _mm512_max_ps(m[0], _mm512_loadu_ps(s + j));
  const __m512 m16 = _mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3]));
  float lanes[16];
  _mm512_storeu_ps(lanes, m16);
  mx = *std::max_element(lanes, lanes + 16);
  return j;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Heads [0, returned) of the state by accumulate_heads_avx512 (none where it does not apply).
template <class Rows>
int heads_by_rows(AttnState& st, const float* p, size_t p_stride, const Rows& v, int n) {
  if (!isa_at_least(Isa::Avx512) || (st.hd != 64 && st.hd != 128)) return 0;
  const int C = st.hd / 16, H = 16 / C;
  int first = 0;
  for (; first + H <= st.g; first += H) {
    float* acc = st.acc + static_cast<size_t>(first) * st.hd;
    if (C == 4) accumulate_heads_avx512<4>(acc, p + first * p_stride, p_stride, v, n);
    else accumulate_heads_avx512<8>(acc, p + first * p_stride, p_stride, v, n);
  }
  return first;
}

}  // namespace

int accumulate_f32_heads(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
  return heads_by_rows(st, p, p_stride, F32Rows16{v, stride}, n);
}

bool accumulate_encoded(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n) {
  const KvRowCodec& c = *v.codec;
  const int hd = c.head_dim, H = hd == 64 ? 4 : 2;
  if (!isa_at_least(Isa::Avx512) || (hd != 64 && hd != 128) || st.g % H != 0) return false;
  const size_t db = c.data_bytes();
  switch (c.dtype) {
    case DType::F16:
      heads_by_rows(st, p, p_stride, F16Rows16{reinterpret_cast<const uint16_t*>(v.data) + static_cast<size_t>(v.h) * hd, db / 2}, n);
      return true;
    case DType::BF16:
      heads_by_rows(st, p, p_stride, Bf16Rows16{reinterpret_cast<const uint16_t*>(v.data) + static_cast<size_t>(v.h) * hd, db / 2}, n);
      return true;
    case DType::Int8:
      heads_by_rows(st, p, p_stride,
                    Int8Rows16{reinterpret_cast<const int8_t*>(v.data) + static_cast<size_t>(v.h) * hd, db, v.params + v.h,
                               static_cast<size_t>(c.n_params())},
                    n);
      return true;
    default: return false;
  }
}
template <class Rows>
int scores_key_pairs(const float* q, int g, int hd, float scale, const Rows& k, int n, float* s, size_t s_stride) {
  if (!isa_at_least(Isa::Avx512) || g < 4 || hd % 8 != 0) return 0;
  if (g % 8 != 0) {
    if (hd > 256) return 0;
    switch (hd) {
      case 64: return key_quads<64>(q, g, hd, scale, k, n, s, s_stride);
      case 128: return key_quads<128>(q, g, hd, scale, k, n, s, s_stride);
      default: return key_quads<0>(q, g, hd, scale, k, n, s, s_stride);
    }
  }
  switch (hd) {  // the common head sizes with their loops unrolled, as scores_keys8
    case 64: return key_pairs<64>(q, g, hd, scale, k, n, s, s_stride);
    case 128: return key_pairs<128>(q, g, hd, scale, k, n, s, s_stride);
    default: return key_pairs<0>(q, g, hd, scale, k, n, s, s_stride);
  }
}
template int scores_key_pairs(const float*, int, int, float, const F32Rows&, int, float*, size_t);
template int scores_key_pairs(const float*, int, int, float, const F16Rows&, int, float*, size_t);
template int scores_key_pairs(const float*, int, int, float, const Bf16Rows&, int, float*, size_t);
template int scores_key_pairs(const float*, int, int, float, const Int8Rows&, int, float*, size_t);
template int scores_key_pairs(const float*, int, int, float, const Int4Rows&, int, float*, size_t);

int exp_minus_blocks(float* s, int n, float mx, float* sum8) { return isa_at_least(Isa::Avx512) ? exp_blocks(s, n, mx, sum8) : 0; }
int max_blocks(const float* s, int n, float& mx) { return isa_at_least(Isa::Avx512) ? max_in_blocks(s, n, mx) : 0; }
#else
int accumulate_f32_heads(AttnState&, const float*, size_t, const float*, size_t, int) { return 0; }
bool accumulate_encoded(AttnState&, const float*, size_t, const EncodedRows&, int) { return false; }
int exp_minus_blocks(float*, int, float, float*) { return 0; }
int max_blocks(const float*, int, float&) { return 0; }
#endif

}  // namespace kvlm::avx512
