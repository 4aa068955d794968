#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/dot.h"

namespace kvlm {

namespace {
constexpr size_t kMinParallelWork = 1 << 16;  // multiply-adds
}  // namespace

void matmul(const float* W, const float* B, int rows, int cols, const float* x, int n, float* y) {
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
    ThreadPool::global().parallel_for(static_cast<size_t>(rows), body);
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

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

void rope_adjacent(float* v, int head_dim, int pos, const float* inv_freq) {
  for (int i = 0; i < head_dim / 2; ++i) {
    float a = pos * inv_freq[i], c = std::cos(a), s = std::sin(a);
    float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

void rope_rotate_half(float* v, int head_dim, int pos, const float* inv_freq) {
  int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    float a = pos * inv_freq[i], c = std::cos(a), s = std::sin(a);
    float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x0 * s + x1 * c;
  }
}

}  // namespace kvlm
