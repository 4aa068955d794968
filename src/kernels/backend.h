// Backend: the operations a model's forward pass is built from, over activations that live on
// the backend's device ([rows][width] floats). Each family composes its layer from these calls
// (model/families/*.cpp), so a new device is one implementation of this interface, and a new
// family touches no kernel. The CPU backend (cpu_backend.h) runs them with kvlm's kernels on its
// context's pool; the Context owns its backend.
//
// KV rows are stored by the caches themselves (kv/), whose pages the context's device holds;
// attention reads them through the batch's metadata (attention_batch.h), never through a call
// back into a cache.
#pragma once
#include <cstddef>

#include "core/buffer.h"
#include "kernels/attention_batch.h"
#include "kernels/dtype.h"
#include "kernels/linear.h"
#include "kernels/ops.h"

namespace kvlm {

// A table of rows (token or position embeddings) as stored: f32, or another dtype's rows of
// row_bytes each, widened per looked-up row.
struct EmbeddingRows {
  DType type = DType::F32;
  const void* data = nullptr;
  size_t row_bytes = 0;
  int width = 0;
};

// How a router's logits choose experts: softmax scores (Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V2)
// or sigmoid scores (DeepSeek-V3); the k highest choice values (the score, plus choice_bias where
// given), among the topk_group of n_group equal groups of experts whose best `group_top` choice
// values sum highest where n_group > 1; the chosen scores, renormalized to sum 1 where
// `renormalize`, times `scale`. Among equal values the lower index is chosen first.
struct RouteSpec {
  int experts = 0, k = 0;
  bool renormalize = true, sigmoid = false;
  const float* choice_bias = nullptr;              // [experts], sigmoid routing only; null: none
  int n_group = 1, topk_group = 1, group_top = 2;  // DeepSeek-V3 sums a group's best two, V2 takes its best
  float scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // out[t] = table row ids[t] (widened to f32), for n ids.
  virtual void embed(const EmbeddingRows& table, const int* ids, int n, float* out) = 0;
  // Norms of n rows of `width` values; bias may be null.
  virtual void rms_norm(const float* x, const float* w, float* out, int n, int width, float eps) = 0;
  virtual void layer_norm(const float* x, const float* w, const float* bias, float* out, int n, int width,
                          float eps) = 0;
  // LayerNorm without bias of each head of n rows of `heads` heads, head h with its own weights
  // w[h][head_dim], in place (StableLM's q/k norm).
  virtual void head_layer_norm(float* x, const float* w, int n, int heads, int head_dim, float eps) = 0;
  // y[n][w.out] = x[n][w.in] * W^T (+ b), in the matrix's own type.
  virtual void linear(const Linear& w, const float* x, int n, float* y) = 0;
  // y[n][out] = x[n][in] * W^T for a plain f32 matrix (a head tied to an f32 embedding table).
  virtual void matmul_f32(const float* w, int out, int in, const float* x, int n, float* y) = 0;
  // Rotates n rows of n_heads head vectors, row t at position pos[t].
  virtual void rope(const RopeSpec& r, float* x, int n, int n_heads, const int* pos) = 0;
  // Causal attention of the batch's new rows over their caches and themselves.
  virtual void attention(const AttentionBatch& b) = 0;
  // h = silu(h) * up (SwiGLU); h = gelu_tanh(h).
  virtual void silu_mul(float* h, const float* up, int n, int width) = 0;
  virtual void gelu_tanh(float* h, int n, int width) = 0;
  // gpt-oss's gate: g = min(h, limit), u = clamp(up, -limit, limit), h = (u + 1) * g * sigmoid(alpha * g).
  virtual void clamped_swiglu(float* h, const float* up, int n, int width, float alpha, float limit) = 0;
  // h = gelu_tanh(h) * up (GeGLU).
  virtual void gelu_mul(float* h, const float* up, int n, int width) = 0;
  // x = cap * tanh(x / cap) (soft-capped logits).
  virtual void softcap(float* x, float cap, int n, int width) = 0;
  // x += y over n rows.
  virtual void add(float* x, const float* y, int n, int width) = 0;
  // x *= a over n rows.
  virtual void scale(float* x, float a, int n, int width) = 0;
  // dst row t [width] = src row t's `width` values, rows src_stride and dst_stride floats apart
  // (a column block of one activation copied into another's).
  virtual void copy_cols(const float* src, size_t src_stride, float* dst, size_t dst_stride, int n, int width) = 0;
  // x = 0 over n rows.
  virtual void zero(float* x, int n, int width) = 0;

  // Mixture-of-experts routing of n rows of router logits [n][experts] into the k chosen experts
  // of each row, ids[n][k] and weights[n][k] (host memory: the forward picks which experts'
  // matrices run from them), by the rule `r` describes.
  virtual void route_top_k(const RouteSpec& r, const float* logits, int n, int* ids, float* weights) = 0;
  // out[i] = x[rows[i]] for n rows of `width`: the rows routed to one expert, gathered.
  virtual void gather_rows(const float* x, const int* rows, int n, int width, float* out) = 0;
  // x[rows[i]] += weights[i] * y[i] for n distinct rows of `width`: an expert's outputs, weighed,
  // back in their tokens' rows.
  virtual void scatter_add_rows(float* x, const int* rows, const float* weights, const float* y, int n, int width) = 0;
};

}  // namespace kvlm
