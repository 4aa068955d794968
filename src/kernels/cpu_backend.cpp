#include "kernels/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/context.h"
#include "kernels/ops.h"

namespace kvlm {

namespace {

// Serial below 64K values: SiLU or GELU over 512 x hidden values was several percent of a
// prefill when serial, while a decode step's rows are too small to wake the workers for.
template <class F>
void for_rows(ThreadPool& pool, int n, size_t values_per_row, F&& fn) {
  if (n > 1 && n * values_per_row >= (1u << 16))
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) fn(static_cast<int>(t));
    });
  else
    for (int t = 0; t < n; ++t) fn(t);
}

}  // namespace

void CpuBackend::embed(const EmbeddingRows& table, const int* ids, int n, float* out) {
  const size_t w = static_cast<size_t>(table.width);
  for (int t = 0; t < n; ++t) {
    const size_t id = static_cast<size_t>(ids[t]);
    if (table.type == DType::F32)
      std::copy_n(static_cast<const float*>(table.data) + id * w, w, out + t * w);
    else
      dtype_traits(table.type).to_float(static_cast<const uint8_t*>(table.data) + id * table.row_bytes, out + t * w, w);
  }
}

void CpuBackend::rms_norm(const float* x, const float* w, float* out, int n, int width, float eps) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) { kvlm::rmsnorm(x + t * W, w, out + t * W, width, eps); });
}

void CpuBackend::layer_norm(const float* x, const float* w, const float* bias, float* out, int n, int width,
                            float eps) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) { kvlm::layernorm(x + t * W, w, bias, out + t * W, width, eps); });
}

void CpuBackend::head_layer_norm(float* x, const float* w, int n, int heads, int head_dim, float eps) {
  const size_t W = static_cast<size_t>(heads) * head_dim;
  for_rows(ctx_.pool(), n, W, [&](int t) {
    for (int h = 0; h < heads; ++h) {
      float* v = x + t * W + static_cast<size_t>(h) * head_dim;
      kvlm::layernorm(v, w + static_cast<size_t>(h) * head_dim, nullptr, v, head_dim, eps);
    }
  });
}

void CpuBackend::linear(const Linear& w, const float* x, int n, float* y) { w.forward(x, n, y, ctx_); }

void CpuBackend::matmul_f32(const float* w, int out, int in, const float* x, int n, float* y) {
  kvlm::matmul(w, nullptr, out, in, x, n, y, &ctx_.pool());
}

void CpuBackend::rope(const RopeSpec& r, float* x, int n, int n_heads, const int* pos) {
  const size_t width = static_cast<size_t>(n_heads) * r.head_dim;
  for_rows(ctx_.pool(), n, width, [&](int t) { rope_heads(r, x + t * width, n_heads, pos[t]); });
}

void CpuBackend::attention(const AttentionBatch& b) { attention_batch(b, ctx_.pool()); }

void CpuBackend::silu_mul(float* h, const float* up, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) { kvlm::silu_mul(h + t * W, up + t * W, W); });
}

void CpuBackend::clamped_swiglu(float* h, const float* up, int n, int width, float alpha, float limit) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) {
    for (size_t i = t * W; i < (t + 1) * W; ++i) {
      const float g = std::min(h[i], limit), u = std::clamp(up[i], -limit, limit);
      h[i] = (u + 1.0f) * g / (1.0f + std::exp(-alpha * g));
    }
  });
}

void CpuBackend::gelu_tanh(float* h, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) { gelu_tanh_inplace(h + t * W, W); });
}

void CpuBackend::gelu_mul(float* h, const float* up, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) {
    gelu_tanh_inplace(h + t * W, W);
    for (size_t i = t * W; i < (t + 1) * W; ++i) h[i] *= up[i];
  });
}

void CpuBackend::softcap(float* x, float cap, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) {
    for (size_t i = t * W; i < (t + 1) * W; ++i) x[i] = cap * std::tanh(x[i] / cap);
  });
}

void CpuBackend::add(float* x, const float* y, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) {
    for (size_t i = t * W; i < (t + 1) * W; ++i) x[i] += y[i];
  });
}

void CpuBackend::scale(float* x, float a, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int t) {
    for (size_t i = t * W; i < (t + 1) * W; ++i) x[i] *= a;
  });
}

void CpuBackend::copy_cols(const float* src, size_t src_stride, float* dst, size_t dst_stride, int n, int width) {
  for (int t = 0; t < n; ++t) std::copy_n(src + t * src_stride, width, dst + t * dst_stride);
}

void CpuBackend::zero(float* x, int n, int width) { std::fill_n(x, static_cast<size_t>(n) * width, 0.0f); }

void CpuBackend::route_top_k(const RouteSpec& r, const float* logits, int n, int* ids, float* weights) {
  const size_t E = static_cast<size_t>(r.experts);
  const int per_group = r.experts / r.n_group;
  std::vector<float> score(E), choice(E), group_value(r.n_group);
  std::vector<int> order(E), groups(r.n_group);
  std::vector<char> kept(r.n_group);
  auto by_value = [](const std::vector<float>& v) {
    return [&v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };
  for (int t = 0; t < n; ++t) {
    const float* z = logits + t * E;
    if (r.sigmoid) {
      for (size_t e = 0; e < E; ++e) {
        score[e] = 1.0f / (1.0f + std::exp(-z[e]));
        choice[e] = score[e] + (r.choice_bias ? r.choice_bias[e] : 0.0f);
      }
    } else {
      const float top = *std::max_element(z, z + E);
      float sum = 0;
      for (size_t e = 0; e < E; ++e) sum += score[e] = std::exp(z[e] - top);
      for (size_t e = 0; e < E; ++e) choice[e] = score[e] /= sum;
    }
    if (r.n_group > 1) {  // experts outside the best topk_group groups cannot be chosen
      for (int g = 0; g < r.n_group; ++g) {
        const float* c = choice.data() + g * per_group;
        float best = -INFINITY, second = -INFINITY;
        for (int i = 0; i < per_group; ++i)
          if (c[i] > best)
            second = best, best = c[i];
          else if (c[i] > second)
            second = c[i];
        group_value[g] = r.group_top == 1 ? best : best + second;
      }
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + r.topk_group, groups.end(), by_value(group_value));
      std::fill(kept.begin(), kept.end(), 0);
      for (int g = 0; g < r.topk_group; ++g) kept[groups[g]] = 1;
      for (size_t e = 0; e < E; ++e)
        if (!kept[e / per_group]) choice[e] = -INFINITY;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + r.k, order.end(), by_value(choice));
    float chosen = 0;
    for (int j = 0; j < r.k; ++j) chosen += score[order[j]];
    for (int j = 0; j < r.k; ++j) {
      ids[t * r.k + j] = order[j];
      weights[t * r.k + j] = (r.renormalize ? score[order[j]] / chosen : score[order[j]]) * r.scale;
    }
  }
}

void CpuBackend::gather_rows(const float* x, const int* rows, int n, int width, float* out) {
  const size_t W = static_cast<size_t>(width);
  for (int i = 0; i < n; ++i) std::copy_n(x + rows[i] * W, W, out + i * W);
}

void CpuBackend::scatter_add_rows(float* x, const int* rows, const float* weights, const float* y, int n, int width) {
  const size_t W = static_cast<size_t>(width);
  for_rows(ctx_.pool(), n, W, [&](int i) {
    float* dst = x + rows[i] * W;
    const float* src = y + i * W;
    for (size_t j = 0; j < W; ++j) dst[j] += weights[i] * src[j];
  });
}

}  // namespace kvlm
