#include "kernels/attention.h"
#include "kernels/dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlm {

void AttnState::reset() {
  std::fill(m, m + g, -std::numeric_limits<float>::infinity());
  std::fill(l, l + g, 0.0f);
  std::fill(acc, acc + static_cast<size_t>(g) * hd, 0.0f);
}

namespace {

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

__attribute__((target("avx2,fma"))) void scores_avx2(const float* q, int g, int hd, float scale, const float* k,
                                                      size_t stride, int n, float* s, size_t s_stride) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < g; ++i) s[i * s_stride + j] = dot_avx2(q + static_cast<size_t>(i) * hd, k + j * stride, hd) * scale;
}

__attribute__((target("avx2,fma"))) void accumulate_avx2(AttnState& st, const float* p, size_t p_stride, const float* v,
                                                          size_t stride, int n) {
  const int hd = st.hd;
  for (int j = 0; j < n; ++j) {
    const float* vj = v + j * stride;
    for (int i = 0; i < st.g; ++i) {
      float* acc = st.acc + static_cast<size_t>(i) * hd;
      __m256 w = _mm256_set1_ps(p[i * p_stride + j]);
      int d = 0;
      for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + d), _mm256_loadu_ps(acc + d)));
      for (; d < hd; ++d) acc[d] += p[i * p_stride + j] * vj[d];
    }
  }
}

}  // namespace

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
  if (cpu_has_avx2())
    scores_avx2(q, g, hd, scale, k, stride, n, s, s_stride);
  else
    scalar::attn_scores(q, g, hd, scale, k, stride, n, s, s_stride);
}

void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
  if (cpu_has_avx2())
    accumulate_avx2(st, p, p_stride, v, stride, n);
  else
    scalar::attn_accumulate(st, p, p_stride, v, stride, n);
}

void attn_update(AttnState& st, float* s, size_t s_stride, int n) {
  for (int i = 0; i < st.g; ++i) {
    float* si = s + i * s_stride;
    float mx = st.m[i];
    for (int j = 0; j < n; ++j) mx = std::max(mx, si[j]);
    float corr = std::exp(st.m[i] - mx);  // exp(-inf) = 0 before the first span
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {
      si[j] = std::exp(si[j] - mx);
      sum += si[j];
    }
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
