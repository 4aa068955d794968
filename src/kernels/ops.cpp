#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/vexp.h"

namespace kvlm {

namespace {
constexpr size_t kMinParallelWork = 1 << 16;  // multiply-adds
}  // namespace

void matmul(const float* W, const float* B, int rows, int cols, const float* x, int n, float* y, ThreadPool* pool) {
  // Threads split the output rows, so each streams a disjoint slice of W once for all n tokens.
  auto body = [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* wr = W + r * cols;
      float bias = B ? B[r] : 0.0f;
      int t = 0;
      for (; t + 4 <= n; t += 4) {  // four tokens per pass over the weight row
        float v[4];
        dot4_f32(wr, x + static_cast<size_t>(t) * cols, cols, cols, v);
        for (int k = 0; k < 4; ++k) y[static_cast<size_t>(t + k) * rows + r] = v[k] + bias;
      }
      for (; t < n; ++t)
        y[static_cast<size_t>(t) * rows + r] = dot_f32(wr, x + static_cast<size_t>(t) * cols, cols) + bias;
    }
  };
  // Waking threads costs microseconds; tiny products run on the caller alone.
  if (static_cast<size_t>(rows) * cols * n < kMinParallelWork)
    body(0, rows);
  else
    (pool ? *pool : ThreadPool::global()).parallel_for(static_cast<size_t>(rows), body);
}

void rmsnorm(const float* x, const float* weight, float* out, int dim, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < dim; ++i) ss += x[i] * x[i];
  float inv = 1.0f / std::sqrt(ss / dim + eps);
  for (int i = 0; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

void layernorm(const float* x, const float* weight, const float* bias, float* out, int dim, float eps) {
  double mean = 0.0;
  for (int i = 0; i < dim; ++i) mean += x[i];
  mean /= dim;
  double var = 0.0;
  for (int i = 0; i < dim; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= dim;
  float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  float m = static_cast<float>(mean);
  for (int i = 0; i < dim; ++i) out[i] = (x[i] - m) * inv * weight[i] + (bias ? bias[i] : 0.0f);
}

void softmax(float* x, int n) {
  if (n <= 0) return;
  float mx = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

#if KVLM_X86
namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

__attribute__((target("avx2,fma"))) inline __m256 silu_mul8(__m256 x, __m256 u) {
  const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// 0.5 x (1 + tanh(u)) = x * sigmoid(2u): one exp, no tanh.
__attribute__((target("avx2,fma"))) inline __m256 gelu8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(kGeluK), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  const __m256 e = exp8_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// Tails go through the same vector code in a padded buffer, so a value's result does not
// depend on where in the row it sits.
__attribute__((target("avx2,fma"))) void silu_mul_avx2(float* h, const float* up, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(h + i, silu_mul8(_mm256_loadu_ps(h + i), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  alignas(32) float a[8] = {}, b[8] = {};
  std::copy(h + i, h + n, a);
  std::copy(up + i, up + n, b);
  _mm256_store_ps(a, silu_mul8(_mm256_load_ps(a), _mm256_load_ps(b)));
  std::copy(a, a + (n - i), h + i);
}

__attribute__((target("avx2,fma"))) void gelu_avx2(float* h, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(h + i, gelu8(_mm256_loadu_ps(h + i)));
  if (i == n) return;
  alignas(32) float a[8] = {};
  std::copy(h + i, h + n, a);
  _mm256_store_ps(a, gelu8(_mm256_load_ps(a)));
  std::copy(a, a + (n - i), h + i);
}
}  // namespace
#endif  // KVLM_X86

namespace scalar {
void silu_mul(float* h, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) h[i] = silu(h[i]) * up[i];
}
void gelu_tanh_inplace(float* h, size_t n) {
  for (size_t i = 0; i < n; ++i) h[i] = gelu_tanh(h[i]);
}
}  // namespace scalar

void silu_mul(float* h, const float* up, size_t n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return silu_mul_avx2(h, up, n);
#endif
  scalar::silu_mul(h, up, n);
}

void gelu_tanh_inplace(float* h, size_t n) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return gelu_avx2(h, n);
#endif
  scalar::gelu_tanh_inplace(h, n);
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi); the vector twin uses x * sigmoid(2u)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

void rope_angles(int pos, const float* inv_freq, int half, float* cos, float* sin) {
  for (int i = 0; i < half; ++i) {
    const float a = pos * inv_freq[i];
    cos[i] = std::cos(a);
    sin[i] = std::sin(a);
  }
}

void rope_adjacent(float* v, int head_dim, const float* cos, const float* sin) {
  for (int i = 0; i < head_dim / 2; ++i) {
    float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * cos[i] - x1 * sin[i];
    v[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
  }
}

void rope_heads(const RopeSpec& r, float* heads, int n_heads, int pos) {
  float cs[512], sn[512];  // head_dim is validated to at most 1024
  rope_angles(pos, r.inv_freq, r.rot_dims / 2, cs, sn);
  for (int h = 0; h < n_heads; ++h) {
    float* v = heads + static_cast<size_t>(h) * r.head_dim;
    if (r.adjacent_pairs)
      rope_adjacent(v, r.rot_dims, cs, sn);
    else
      rope_rotate_half(v, r.rot_dims, cs, sn);
  }
}

void rope_rotate_half(float* v, int head_dim, const float* cos, const float* sin) {
  int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * cos[i] - x1 * sin[i];
    v[i + half] = x0 * sin[i] + x1 * cos[i];
  }
}

}  // namespace kvlm
