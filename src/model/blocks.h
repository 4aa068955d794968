// The pieces families share when they build their forward from the backend's ops, as
// llama.cpp's graph helpers (build_norm, build_attn, build_ffn) serve its src/models/*.cpp.
// Each is a few op calls; a family whose layer differs calls the ops itself instead.
#pragma once
#include "model/forward_step.h"
#include "model/model.h"

namespace kvlm::blocks {

// A step's activations, [rows][width] each, in the step's scratch: the residual stream x, a
// normed copy xn, the projections, attention's output, the MLP's two hidden buffers (up unused
// by the ungated MLPs: null unless gated) and a block output tmp.
struct Acts {
  float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
};
Acts activations(ForwardStep& s, const ModelConfig& c, bool gated = true);

// x [rows][dim] = the tokens' embeddings, plus their learned positions where the model has them
// (looked up into pos, scratch [rows][dim]).
void embed(ForwardStep& s, const Model& m, float* x, float* pos);
// Layer `layer`'s rotary embedding on x [rows][n_heads * head_dim]; nothing without RoPE.
void rope(ForwardStep& s, const Model& m, int layer, float* x, int n_heads);
// The query, key and value projections of xn [rows][dim].
void qkv(ForwardStep& s, const LayerWeights& L, const float* xn, float* q, float* k, float* v);
// Layer `layer`'s attention shape, score scale and window from the config.
AttentionParams attention_params(const ModelConfig& c, int layer);
// out = down(silu(gate(xn)) * up(xn)); gate and up are scratch [rows][hidden].
void swiglu_mlp(ForwardStep& s, const LayerWeights& L, const float* xn, float* gate, float* up, float* out);
// out = the weighted sum of the experts the router picks for each row of xn (each a SwiGLU MLP),
// one matrix product per expert over the rows routed to it; experts no row chose are not read.
void moe_mlp(ForwardStep& s, const ModelConfig& c, const LayerWeights& L, const float* xn, float* out);
// Layer `layer`'s gated MLP: its experts where it has them, else swiglu_mlp.
void gated_mlp(ForwardStep& s, const ModelConfig& c, int layer, const LayerWeights& L, const float* xn, float* gate,
               float* up, float* out);
// out = down(gelu_tanh(up(xn))); h is scratch [rows][hidden].
void gelu_mlp(ForwardStep& s, const LayerWeights& L, const float* xn, float* h, float* out);
// The output rows of x, through the final norm (RMSNorm, or LayerNorm with its bias) and the LM
// head (the f32 embedding table itself when tied) into the step's logits. a, b: scratch
// [rows][dim].
// Both return the logits: [rows][vocab].
struct Logits {
  float* data;
  int rows;
};
Logits rms_head(ForwardStep& s, const Model& m, const float* x, float* a, float* b);
Logits layer_norm_head(ForwardStep& s, const Model& m, const float* x, float* a, float* b);

}  // namespace kvlm::blocks
