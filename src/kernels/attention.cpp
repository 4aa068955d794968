#include "kernels/attention.h"
#include "core/cpu.h"
#include "kernels/dot.h"
#include "kernels/vexp.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>

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
// time). Rows kAhead keys ahead are asked for explicitly.
constexpr int kAhead = 8;
inline void prefetch_row(const float* p, int hd) {
  for (int d = 0; d < hd; d += 16) _mm_prefetch(reinterpret_cast<const char*>(p + d), _MM_HINT_T0);
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int n) {
  int i = 0;
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  float s = _mm_cvtss_f32(s4);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Four dot products at once, reduced together: [a0, a1, a2, a3] summed lane-wise.
__attribute__((target("avx2,fma"))) inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One dot product with reduce4's summation tree, so a key's score does not depend on whether it
// was computed in a batch of four (runs of the cache split batches differently by layout).
__attribute__((target("avx2,fma"))) inline float dot_tree(const float* a, const float* b, int hd) {
  __m256 acc = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  const __m256 z = _mm256_setzero_ps();
  return _mm_cvtss_f32(reduce4(acc, z, z, z));
}

__attribute__((target("avx2,fma"))) void scores_avx2(const float* q, int g, int hd, float scale, const float* k,
                                                      size_t stride, int n, float* s, size_t s_stride) {
  const __m128 sc = _mm_set1_ps(scale);
  alignas(16) float r[4];
  if (hd % 8 == 0 && g >= 4) {  // GQA: four query heads of the group per key
    for (int j = 0; j < n; ++j) {
      const float* kj = k + j * stride;
      prefetch_row(kj + kAhead * stride, hd);
      int i = 0;
      for (; i + 4 <= g; i += 4) {
        const float* q0 = q + static_cast<size_t>(i) * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d += 8) {
          const __m256 kv = _mm256_loadu_ps(kj + d);
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), kv, a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + hd + d), kv, a1);
          a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * hd + d), kv, a2);
          a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * hd + d), kv, a3);
        }
        _mm_store_ps(r, _mm_mul_ps(reduce4(a0, a1, a2, a3), sc));
        for (int x = 0; x < 4; ++x) s[(i + x) * s_stride + j] = r[x];
      }
      for (; i < g; ++i) s[i * s_stride + j] = dot_tree(q + static_cast<size_t>(i) * hd, kj, hd) * scale;
    }
    return;
  }
  for (int i = 0; i < g; ++i) {  // few heads: four keys per query head
    const float* qi = q + static_cast<size_t>(i) * hd;
    int j = 0;
    for (; hd % 8 == 0 && j + 4 <= n; j += 4) {
      const float* k0 = k + j * stride;
      if (i == 0)
        for (int x = 0; x < 4; ++x) prefetch_row(k0 + (kAhead + x) * stride, hd);
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qi + d);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + stride + d), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * stride + d), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * stride + d), a3);
      }
      _mm_storeu_ps(s + i * s_stride + j, _mm_mul_ps(reduce4(a0, a1, a2, a3), sc));
    }
    for (; j < n; ++j)
      s[i * s_stride + j] = (hd % 8 == 0 ? dot_tree(qi, k + j * stride, hd) : dot_avx2(qi, k + j * stride, hd)) * scale;
  }
}

// A head's accumulator (C slices of 8) stays in registers across the span's keys, and each
// value row is read once per head. Per element the keys are summed in order, as the twin does.
template <int C, bool Prefetch = false>
__attribute__((target("avx2,fma"))) void accumulate_regs(float* acc, const float* p, const float* v, size_t stride, int n) {
  __m256 a[C];
  for (int c = 0; c < C; ++c) a[c] = _mm256_loadu_ps(acc + 8 * c);
  for (int j = 0; j < n; ++j) {
    const __m256 w = _mm256_set1_ps(p[j]);
    const float* vj = v + j * stride;
    if (Prefetch) prefetch_row(vj + kAhead * stride, 8 * C);
    for (int c = 0; c < C; ++c) a[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * c), a[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + 8 * c, a[c]);
}

__attribute__((target("avx2,fma"))) void accumulate_avx2(AttnState& st, const float* p, size_t p_stride, const float* v,
                                                          size_t stride, int n) {
  const int hd = st.hd;
  for (int i = 0; i < st.g; ++i) {
    float* acc = st.acc + static_cast<size_t>(i) * hd;
    const float* pi = p + i * p_stride;
    switch (hd) {  // the common head sizes; the first head's pass brings the rows in
      case 64:
        i == 0 ? accumulate_regs<8, true>(acc, pi, v, stride, n) : accumulate_regs<8>(acc, pi, v, stride, n);
        continue;
      case 128:
        i == 0 ? accumulate_regs<16, true>(acc, pi, v, stride, n) : accumulate_regs<16>(acc, pi, v, stride, n);
        continue;
      case 32: accumulate_regs<4>(acc, pi, v, stride, n); continue;
      case 16: accumulate_regs<2>(acc, pi, v, stride, n); continue;
      case 8: accumulate_regs<1>(acc, pi, v, stride, n); continue;
      default: break;
    }
    int d = 0;
    for (; d + 8 <= hd; d += 8) accumulate_regs<1>(acc + d, pi, v + d, stride, n);
    for (; d < hd; ++d)
      for (int j = 0; j < n; ++j) acc[d] += pi[j] * v[j * stride + d];
  }
}

__attribute__((target("avx2,fma"))) void exp_minus_avx2(float* s, int n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  int j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), m)));
  if (j == n) return;
  alignas(32) float t[8] = {};
  std::copy(s + j, s + n, t);
  _mm256_store_ps(t, exp8_avx2(_mm256_sub_ps(_mm256_load_ps(t), m)));
  std::copy(t, t + (n - j), s + j);
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
  if (isa_at_least(Isa::Avx2)) return scores_avx2(q, g, hd, scale, k, stride, n, s, s_stride);
#endif
  scalar::attn_scores(q, g, hd, scale, k, stride, n, s, s_stride);
}

void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return accumulate_avx2(st, p, p_stride, v, stride, n);
#endif
  scalar::attn_accumulate(st, p, p_stride, v, stride, n);
}

void attn_update(AttnState& st, float* s, size_t s_stride, int n) {
  for (int i = 0; i < st.g; ++i) {
    float* si = s + i * s_stride;
    float mx = st.m[i];
    for (int j = 0; j < n; ++j) mx = std::max(mx, si[j]);
    float corr = std::exp(st.m[i] - mx);  // exp(-inf) = 0 before the first span
#if KVLM_X86
    if (isa_at_least(Isa::Avx2))
      exp_minus_avx2(si, n, mx);
    else
#endif
      for (int j = 0; j < n; ++j) si[j] = std::exp(si[j] - mx);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += si[j];
    st.l[i] = st.l[i] * corr + sum;
    if (corr != 1.0f) {
      float* acc = st.acc + static_cast<size_t>(i) * st.hd;
      for (int d = 0; d < st.hd; ++d) acc[d] *= corr;
    }
    st.m[i] = mx;
  }
}

void attn_finish(const AttnState& st, float* out, size_t out_stride) {
  for (int i = 0; i < st.g; ++i) {
    float inv = st.l[i] > 0 ? 1.0f / st.l[i] : 0.0f;
    for (int d = 0; d < st.hd; ++d) out[i * out_stride + d] = st.acc[static_cast<size_t>(i) * st.hd + d] * inv;
  }
}

}  // namespace kvlm
