// Elementwise and normalization operators of the transformer forward pass.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/linear.h"

namespace kvlm {

// y[n][out] = x[n][in] * W^T (+ b). W is row-major [out][in]; b may be null.
void matmul(const float* W, const float* b, int out, int in, const float* x, int n, float* y);

// out[i] = x[i] / rms(x) * weight[i]
void rmsnorm(const float* x, const float* weight, float* out, int dim, float eps);
// out[i] = (x[i] - mean) / std * weight[i] + bias[i]
void layernorm(const float* x, const float* weight, const float* bias, float* out, int dim, float eps);
// In-place softmax over n values.
void softmax(float* x, int n);
float silu(float x);
float gelu_tanh(float x);

// RoPE on one head vector of head_dim values at position pos.
// Adjacent pairs (2i, 2i+1): llama2.c and GGUF. Rotate-half (i, i + d/2): Hugging Face.
// inv_freq[i] = theta^(-2i/d), precomputed (and possibly rescaled) by the model.
void rope_adjacent(float* v, int head_dim, int pos, const float* inv_freq);
void rope_rotate_half(float* v, int head_dim, int pos, const float* inv_freq);

}  // namespace kvlm
