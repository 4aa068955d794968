// Elementwise and normalization operators of the transformer forward pass.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/linear.h"

namespace kvlm {

// y[n][out] = x[n][in] * W^T (+ b). W is row-major [out][in]; b may be null.
// pool: where it is split (default: the process pool).
class ThreadPool;
void matmul(const float* W, const float* b, int out, int in, const float* x, int n, float* y,
            ThreadPool* pool = nullptr);

// out[i] = x[i] / rms(x) * weight[i]
void rmsnorm(const float* x, const float* weight, float* out, int dim, float eps);
// out[i] = (x[i] - mean) / std * weight[i] + bias[i]
void layernorm(const float* x, const float* weight, const float* bias, float* out, int dim, float eps);
// In-place softmax over n values.
void softmax(float* x, int n);
float silu(float x);
float gelu_tanh(float x);
// Rows of activations, vectorized (AVX2 exp polynomial) with scalar twins (libm):
void silu_mul(float* h, const float* up, size_t n);  // h = silu(h) * up (SwiGLU)
void gelu_tanh_inplace(float* h, size_t n);          // GPT-2's tanh-approximated GELU
namespace scalar {
void silu_mul(float* h, const float* up, size_t n);
void gelu_tanh_inplace(float* h, size_t n);
}  // namespace scalar

// RoPE on one head vector of head_dim values, given the cos/sin of its position's angles
// (rope_angles: angle i = pos * inv_freq[i], shared by every head of a position).
// Adjacent pairs (2i, 2i+1): llama2.c and GGUF. Rotate-half (i, i + d/2): Hugging Face.
// inv_freq[i] = theta^(-2i/d), precomputed (and possibly rescaled) by the model.
void rope_angles(int pos, const float* inv_freq, int half, float* cos, float* sin);
void rope_adjacent(float* v, int head_dim, const float* cos, const float* sin);
void rope_rotate_half(float* v, int head_dim, const float* cos, const float* sin);

// Rotary embedding of head vectors: pairs (2i, 2i+1) or (i, i + d/2) among the first rot_dims
// values of each head (the rest pass through), inverse frequency per pair.
struct RopeSpec {
  bool adjacent_pairs = false;
  const float* inv_freq = nullptr;  // [rot_dims / 2]
  int head_dim = 0, rot_dims = 0;
};
// Rotates n_heads consecutive head vectors of one position (angles computed once); a negative
// pos rotates back.
void rope_heads(const RopeSpec& r, float* heads, int n_heads, int pos);

}  // namespace kvlm
