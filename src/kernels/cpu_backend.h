// The CPU backend: the Backend ops run by kvlm's kernels (AVX2 / AVX-512 / AMX with scalar twins)
// on one context's pool and ISA. Row-wise ops (norms, RoPE, activations, adds) split their rows
// across the pool once a batch makes them large enough to pay for the wake-up.
#pragma once
#include "kernels/backend.h"

namespace kvlm {

class Context;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Context& ctx) : ctx_(ctx) {}
  Device device() const override { return Device::Host; }
  void embed(const EmbeddingRows& table, const int* ids, int n, float* out) override;
  void rms_norm(const float* x, const float* w, float* out, int n, int width, float eps) override;
  void layer_norm(const float* x, const float* w, const float* bias, float* out, int n, int width, float eps) override;
  void head_layer_norm(float* x, const float* w, int n, int heads, int head_dim, float eps) override;
  void linear(const Linear& w, const float* x, int n, float* y) override;
  void matmul_f32(const float* w, int out, int in, const float* x, int n, float* y) override;
  void rope(const RopeSpec& r, float* x, int n, int n_heads, const int* pos) override;
  void attention(const AttentionBatch& b) override;
  void silu_mul(float* h, const float* up, int n, int width) override;
  void clamped_swiglu(float* h, const float* up, int n, int width, float alpha, float limit) override;
  void gelu_tanh(float* h, int n, int width) override;
  void gelu_mul(float* h, const float* up, int n, int width) override;
  void softcap(float* x, float cap, int n, int width) override;
  void add(float* x, const float* y, int n, int width) override;
  void scale(float* x, float a, int n, int width) override;
  void copy_cols(const float* src, size_t src_stride, float* dst, size_t dst_stride, int n, int width) override;
  void zero(float* x, int n, int width) override;
  void route_top_k(const RouteSpec& r, const float* logits, int n, int* ids, float* weights) override;
  void gather_rows(const float* x, const int* rows, int n, int width, float* out) override;
  void scatter_add_rows(float* x, const int* rows, const float* weights, const float* y, int n, int width) override;

 private:
  Context& ctx_;
};

}  // namespace kvlm
