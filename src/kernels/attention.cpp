#include "kernels/attention.h"

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

// Shared by both twins: rescale the state to the new maxima and add the span's weights.
template <typename Dot, typename Axpy>
void fold(const float* q, float scale, const float* k, const float* v, size_t stride, int n, AttnState& st,
          float* s, Dot dot, Axpy axpy) {
  const int hd = st.hd;
  for (int i = 0; i < st.g; ++i) {
    float* si = s + static_cast<size_t>(i) * n;
    float mx = st.m[i];
    for (int j = 0; j < n; ++j) {
      si[j] = dot(q + static_cast<size_t>(i) * hd, k + j * stride, hd) * scale;
      mx = std::max(mx, si[j]);
    }
    float corr = std::exp(st.m[i] - mx);  // exp(-inf) = 0 on the first span
    float* acc = st.acc + static_cast<size_t>(i) * hd;
    if (corr != 1.0f) {
      st.l[i] *= corr;
      for (int d = 0; d < hd; ++d) acc[d] *= corr;
    }
    for (int j = 0; j < n; ++j) {
      float p = std::exp(si[j] - mx);
      st.l[i] += p;
      axpy(p, v + j * stride, acc, hd);
    }
    st.m[i] = mx;
  }
}

float dot_scalar(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void axpy_scalar(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) inline float dot_avx2(const float* a, const float* b, int n) {
  int i = 0;
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  __m128 s4 = _mm_add_ps(lo, hi);
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  float s = _mm_cvtss_f32(s4);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
__attribute__((target("avx2,fma"))) inline void axpy_avx2(float a, const float* x, float* y, int n) {
  int i = 0;
  __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) void span_avx2(const float* q, float scale, const float* k, const float* v,
                                                    size_t stride, int n, AttnState& st, float* s) {
  fold(q, scale, k, v, stride, n, st, s, dot_avx2, axpy_avx2);
}

bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
}

}  // namespace

namespace scalar {
void attend_span(const float* q, float scale, const float* k, const float* v, size_t stride, int n, AttnState& st,
                 float* scratch) {
  fold(q, scale, k, v, stride, n, st, scratch, dot_scalar, axpy_scalar);
}
}  // namespace scalar

void attend_span(const float* q, float scale, const float* k, const float* v, size_t stride, int n, AttnState& st,
                 float* scratch) {
  if (n <= 0) return;
  if (has_avx2())
    span_avx2(q, scale, k, v, stride, n, st, scratch);
  else
    scalar::attend_span(q, scale, k, v, stride, n, st, scratch);
}

void attend_finish(const AttnState& st, float* out, size_t out_stride) {
  for (int i = 0; i < st.g; ++i) {
    float inv = st.l[i] > 0 ? 1.0f / st.l[i] : 0.0f;
    for (int d = 0; d < st.hd; ++d) out[i * out_stride + d] = st.acc[static_cast<size_t>(i) * st.hd + d] * inv;
  }
}

}  // namespace kvlm
