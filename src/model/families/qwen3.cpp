// Qwen3 (Qwen3ForCausalLM): Qwen2's layer without the q/k/v biases (attention_bias, default off),
// with a per-head RMSNorm of queries and keys between their projections and RoPE (q_norm,
// k_norm), an explicit head_dim, and Qwen2's window rules. GGUF keeps rotate-half RoPE.
#include "model/blocks.h"
#include "model/families/llama.h"

namespace kvlm {

namespace {

ModelConfig qwen3_from_hf(const HfReader& r) {
  ModelConfig c = qwen2_like_from_hf(r, "qwen3");
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = 0;
  c.qk_norm = QkNorm::PerHead;
  return c;
}

void qwen3_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
  c.qk_norm = QkNorm::PerHead;
}

void bind_qwen3(const TensorSource& s, Model& m, TensorLayout layout) {
  bind_llama_like(s, m, layout);
  const ModelConfig& c = m.cfg;
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    m.layers[i].q_norm = s.read_f32(p + "q_norm.weight", {c.head_dim});
    m.layers[i].k_norm = s.read_f32(p + "k_norm.weight", {c.head_dim});
  }
}

void forward_qwen3(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    // Every head of every row is one RMSNorm row of head_dim values, in place.
    s.ops.rms_norm(q, L.q_norm.data(), q, n * c.n_heads, c.head_dim, c.norm_eps);
    s.ops.rms_norm(k, L.k_norm.data(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::swiglu_mlp(s, L, xn, gate, up, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

const GgufNames kQwen3GgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_q_norm", "self_attn.q_norm"},
     {"attn_k_norm", "self_attn.k_norm"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kQwen3Family = {"qwen3",         "qwen3",          "Qwen3ForCausalLM", "qwen3",      qwen3_from_hf,
                                    qwen3_from_gguf, &kQwen3GgufNames, bind_qwen3,         forward_qwen3};

}  // namespace kvlm
