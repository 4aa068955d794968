#include "model/blocks.h"

#include <algorithm>
#include <vector>

namespace kvlm::blocks {

Acts activations(ForwardStep& s, const ModelConfig& c, bool gated) {
  return Acts{
      s.act(0, c.dim),      s.act(1, c.dim),     s.act(2, c.q_dim()),    s.act(3, c.kv_dim()),
      s.act(4, c.kv_dim()), s.act(5, c.q_dim()), s.act(6, c.hidden_dim), gated ? s.act(7, c.hidden_dim) : nullptr,
      s.act(8, c.dim)};
}

void embed(ForwardStep& s, const Model& m, float* x, float* pos) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  s.ops.embed(m.token_rows(), s.tokens.data(), n, x);
  if (!c.learned_positions) return;
  s.ops.embed(EmbeddingRows{DType::F32, m.pos_emb.data(), c.dim * sizeof(float), c.dim}, s.positions.data(), n, pos);
  s.ops.add(x, pos, n, c.dim);
}

void rope(ForwardStep& s, const Model& m, int layer, float* x, int n_heads) {
  const RopeTable& t = m.rope_of_layer(layer);
  if (t.kind != RopeKind::None) s.ops.rope(t.spec(), x, s.rows(), n_heads, s.positions.data());
}

void qkv(ForwardStep& s, const LayerWeights& L, const float* xn, float* q, float* k, float* v) {
  s.ops.linear(L.wq, xn, s.rows(), q);
  s.ops.linear(L.wk, xn, s.rows(), k);
  s.ops.linear(L.wv, xn, s.rows(), v);
}

AttentionParams attention_params(const ModelConfig& c, int layer) {
  return AttentionParams{
      layer, c.n_heads, c.n_kv_heads, c.head_dim, c.layer_attn_scale(layer), c.attn_softcap, c.layer_window[layer]};
}

void swiglu_mlp(ForwardStep& s, const LayerWeights& L, const float* xn, float* gate, float* up, float* out) {
  s.ops.linear(L.w_gate, xn, s.rows(), gate);
  s.ops.linear(L.w_up, xn, s.rows(), up);
  s.ops.silu_mul(gate, up, s.rows(), L.w_up.out);
  s.ops.linear(L.w_down, gate, s.rows(), out);
}

void moe_mlp(ForwardStep& s, const ModelConfig& c, const LayerWeights& L, const float* xn, float* out) {
  // Slots past the ones activations() numbers.
  enum { kRouter = 16, kIn, kGate, kUp, kOut };
  const int n = s.rows(), k = c.experts_per_token;
  float* logits = s.act(kRouter, c.n_experts);
  s.ops.linear(L.router, xn, n, logits);
  std::vector<int> ids(static_cast<size_t>(n) * k);
  std::vector<float> weights(ids.size());
  RouteSpec route;
  route.experts = c.n_experts;
  route.k = k;
  route.renormalize = c.norm_topk_prob;
  route.sigmoid = c.route_sigmoid;
  route.choice_bias = L.router_choice_bias.empty() ? nullptr : L.router_choice_bias.data();
  route.n_group = c.n_group;
  route.topk_group = c.topk_group;
  route.group_top = c.group_top;
  route.scale = c.routed_scaling_factor;
  s.ops.route_top_k(route, logits, n, ids.data(), weights.data());
  // Rows per expert, in row order: each expert's rows are one batch for its matrices.
  std::vector<std::vector<int>> rows(c.n_experts);
  std::vector<std::vector<float>> row_weights(c.n_experts);
  for (size_t i = 0; i < ids.size(); ++i) {
    rows[ids[i]].push_back(static_cast<int>(i / k));
    row_weights[ids[i]].push_back(weights[i]);
  }
  float* in = s.act(kIn, c.dim);
  float* gate = s.act(kGate, std::max(c.expert_hidden_dim, c.shared_hidden_dim));
  float* up = s.act(kUp, std::max(c.expert_hidden_dim, c.shared_hidden_dim));
  float* y = s.act(kOut, c.dim);
  s.ops.zero(out, n, c.dim);
  // y = down(act(gate(x_in)) * up(x_in)) over m rows, act SiLU or gpt-oss's clamped gate.
  auto expert = [&](const Expert& x, const float* x_in, int m, bool clamped) {
    s.ops.linear(x.gate, x_in, m, gate);
    s.ops.linear(x.up, x_in, m, up);
    if (clamped)
      s.ops.clamped_swiglu(gate, up, m, x.up.out, c.swiglu_alpha, c.swiglu_limit);
    else
      s.ops.silu_mul(gate, up, m, x.up.out);
    s.ops.linear(x.down, gate, m, y);
  };
  for (int e = 0; e < c.n_experts; ++e) {
    const int m = static_cast<int>(rows[e].size());
    if (m == 0) continue;
    s.ops.gather_rows(xn, rows[e].data(), m, c.dim, in);
    expert(L.experts[e], in, m, c.swiglu_limit > 0);
    s.ops.scatter_add_rows(out, rows[e].data(), row_weights[e].data(), y, m, c.dim);
  }
  if (c.shared_hidden_dim > 0) {  // the always-on expert, over every row
    expert(L.shared_expert, xn, n, false);
    s.ops.add(out, y, n, c.dim);
  }
}

void gated_mlp(ForwardStep& s, const ModelConfig& c, int layer, const LayerWeights& L, const float* xn, float* gate,
               float* up, float* out) {
  if (c.is_moe_layer(layer))
    moe_mlp(s, c, L, xn, out);
  else
    swiglu_mlp(s, L, xn, gate, up, out);
}

void gelu_mlp(ForwardStep& s, const LayerWeights& L, const float* xn, float* h, float* out) {
  s.ops.linear(L.w_up, xn, s.rows(), h);
  s.ops.gelu_tanh(h, s.rows(), L.w_up.out);
  s.ops.linear(L.w_down, h, s.rows(), out);
}

namespace {

Logits logits(ForwardStep& s, const Model& m, const float* xn, int count) {
  const ModelConfig& c = m.cfg;
  float* out = s.logits(count, c.vocab_size);
  if (m.lm_head.out == 0)  // tied, f32: read the embedding table itself
    s.ops.matmul_f32(m.tok_emb.data(), c.vocab_size, c.dim, xn, count, out);
  else
    s.ops.linear(m.lm_head, xn, count, out);
  return {out, count};
}

}  // namespace

Logits rms_head(ForwardStep& s, const Model& m, const float* x, float* a, float* b) {
  const int count = s.output_rows(x, m.cfg.dim, a);
  s.ops.rms_norm(a, m.final_norm.data(), b, count, m.cfg.dim, m.cfg.norm_eps);
  return logits(s, m, b, count);
}

Logits layer_norm_head(ForwardStep& s, const Model& m, const float* x, float* a, float* b) {
  const int count = s.output_rows(x, m.cfg.dim, a);
  const float* bias = m.final_norm_bias.empty() ? nullptr : m.final_norm_bias.data();
  s.ops.layer_norm(a, m.final_norm.data(), bias, b, count, m.cfg.dim, m.cfg.norm_eps);
  return logits(s, m, b, count);
}

}  // namespace kvlm::blocks
