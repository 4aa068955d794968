#include "model/forward.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/ops.h"

namespace kvlm {

namespace {

void norm_rows(const ModelConfig& c, const float* x, const std::vector<float>& w, const std::vector<float>& b,
               float* out, int n) {
  for (int t = 0; t < n; ++t) {
    const float* xr = x + static_cast<size_t>(t) * c.dim;
    float* o = out + static_cast<size_t>(t) * c.dim;
    if (c.norm == NormKind::RMSNorm)
      rmsnorm(xr, w.data(), o, c.dim, c.norm_eps);
    else
      layernorm(xr, w.data(), b.empty() ? nullptr : b.data(), o, c.dim, c.norm_eps);
  }
}

void apply_rope(const Model& m, float* x, int n, int n_heads, int pos0) {
  const ModelConfig& c = m.cfg;
  if (c.rope == RopeKind::None) return;
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<size_t>(t) * n_heads + h) * c.head_dim;
      if (c.rope == RopeKind::AdjacentPairs)
        rope_adjacent(v, c.head_dim, pos0 + t, m.rope_inv_freq.data());
      else
        rope_rotate_half(v, c.head_dim, pos0 + t, m.rope_inv_freq.data());
    }
}

// out[n][q_dim]: each query attends to the cached positions and to the chunk's own K/V
// (q, k, v are the chunk's [n][q_dim] / [n][kv_dim] rows), causally and within the window.
void attention(const ModelConfig& c, const KvCache& kv, int layer, int pos0, int n, const float* q,
               const float* k, const float* v, float* out) {
  const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads, kv_dim = c.kv_dim(), q_dim = c.q_dim();
  const int window = c.layer_window[layer];
  auto body = [&](size_t b, size_t e) {
    std::vector<float> scores;
    for (size_t idx = b; idx < e; ++idx) {
      int t = static_cast<int>(idx / c.n_heads), h = static_cast<int>(idx % c.n_heads);
      int p = pos0 + t, kvh = h / group;
      int lo = window > 0 ? std::max(0, p - window + 1) : 0;
      const float* qh = q + static_cast<size_t>(t) * q_dim + h * hd;
      scores.resize(p - lo + 1);
      for (int j = lo; j <= p; ++j) {
        const float* kj = j < pos0 ? kv.key(layer, j) : k + static_cast<size_t>(j - pos0) * kv_dim;
        scores[j - lo] = dot_f32(qh, kj + kvh * hd, hd) * c.attn_scale;
      }
      softmax(scores.data(), p - lo + 1);
      float* o = out + static_cast<size_t>(t) * q_dim + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int j = lo; j <= p; ++j) {
        const float* vj = j < pos0 ? kv.value(layer, j) : v + static_cast<size_t>(j - pos0) * kv_dim;
        axpy_f32(scores[j - lo], vj + kvh * hd, o, hd);
      }
    }
  };
  const size_t items = static_cast<size_t>(n) * c.n_heads;
  const size_t work = items * (pos0 + n) * hd;  // multiply-adds, roughly
  if (work < (1u << 15))
    body(0, items);
  else
    ThreadPool::global().parallel_for(items, body);
}

void add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

void forward(const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which, std::vector<float>& logits) {
  const ModelConfig& c = m.cfg;
  const int pos0 = kv.length();
  if (n <= 0) fail("forward needs at least one token");
  if (pos0 + n > kv.capacity())
    fail("sequence of ", pos0 + n, " tokens exceeds the context length ", kv.capacity());
  if (c.learned_positions && pos0 + n > c.max_seq_len)
    fail("sequence of ", pos0 + n, " tokens exceeds the model's ", c.max_seq_len, " learned positions");
  const size_t D = c.dim;

  // Activations, one row per token.
  std::vector<float> x(n * D);                                      // [n][dim] residual stream
  std::vector<float> xn(n * D);                                     // [n][dim] normed
  std::vector<float> q(static_cast<size_t>(n) * c.q_dim());         // [n][q_dim]
  std::vector<float> k(static_cast<size_t>(n) * c.kv_dim());        // [n][kv_dim]
  std::vector<float> v(static_cast<size_t>(n) * c.kv_dim());        // [n][kv_dim]
  std::vector<float> att(static_cast<size_t>(n) * c.q_dim());       // [n][q_dim]
  std::vector<float> h1(static_cast<size_t>(n) * c.hidden_dim);     // [n][hidden]
  std::vector<float> h2(c.mlp == MlpKind::SwiGLU ? h1.size() : 0);  // [n][hidden] (up, SwiGLU)
  std::vector<float> tmp(n * D);                                    // [n][dim]

  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
      fail("token id ", tokens[t], " is outside the vocabulary [0, ", c.vocab_size, ")");
    std::copy_n(m.tok_emb.data() + static_cast<size_t>(tokens[t]) * D, D, x.data() + t * D);
    if (c.learned_positions) add(x.data() + t * D, m.pos_emb.data() + static_cast<size_t>(pos0 + t) * D, D);
  }

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    norm_rows(c, x.data(), L.attn_norm, L.attn_norm_bias, xn.data(), n);
    L.wq.forward(xn.data(), n, q.data());
    L.wk.forward(xn.data(), n, k.data());
    L.wv.forward(xn.data(), n, v.data());
    apply_rope(m, q.data(), n, c.n_heads, pos0);
    apply_rope(m, k.data(), n, c.n_kv_heads, pos0);
    attention(c, kv, l, pos0, n, q.data(), k.data(), v.data(), att.data());
    kv.store(l, pos0, n, k.data(), v.data());
    L.wo.forward(att.data(), n, tmp.data());
    add(x.data(), tmp.data(), n * D);

    norm_rows(c, x.data(), L.mlp_norm, L.mlp_norm_bias, xn.data(), n);
    if (c.mlp == MlpKind::SwiGLU) {
      L.w_gate.forward(xn.data(), n, h1.data());
      L.w_up.forward(xn.data(), n, h2.data());
      for (size_t i = 0; i < h1.size(); ++i) h1[i] = silu(h1[i]) * h2[i];
    } else {
      L.w_up.forward(xn.data(), n, h1.data());
      for (float& a : h1) a = gelu_tanh(a);
    }
    L.w_down.forward(h1.data(), n, tmp.data());
    add(x.data(), tmp.data(), n * D);
  }
  kv.set_length(pos0 + n);

  const int first = which == LogitsFor::All ? 0 : n - 1, rows = n - first;
  norm_rows(c, x.data() + first * D, m.final_norm, m.final_norm_bias, xn.data(), rows);
  logits.resize(static_cast<size_t>(rows) * c.vocab_size);
  if (c.tied_embeddings)
    matmul(m.tok_emb.data(), nullptr, c.vocab_size, c.dim, xn.data(), rows, logits.data());
  else
    m.lm_head.forward(xn.data(), rows, logits.data());
}

}  // namespace kvlm
