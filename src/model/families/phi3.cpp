// Phi-3 and Phi-4 (Phi3ForCausalLM): Llama with q, k and v in one fused projection (qkv_proj)
// and gate and up in another (gate_up_proj, gate first), one sliding window for every layer,
// and partial rotary embeddings (partial_rotary_factor, Phi-4-mini). LongRoPE (Phi-3.5-mini,
// Phi-4-mini: factors chosen by length) is refused by name. GGUF: attn_qkv and a fused ffn_up;
// rotate-half RoPE.
#include <algorithm>

#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/llama.h"

namespace kvlm {

namespace {

ModelConfig phi3_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "phi3", /*partial_rotary=*/true);
  c.qkv_bias = c.o_bias = c.mlp_bias = 0;
  std::fill(c.layer_window.begin(), c.layer_window.end(), r.integer_or("sliding_window", 0));
  return c;
}

void phi3_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
  if (g.tensors.has("rope_factors_long.weight") || g.tensors.has("rope_factors_short.weight"))
    fail(g.path, ": LongRoPE (rope_factors_long / rope_factors_short) is not supported");
}

void bind_phi3(const TensorSource& s, Model& m, TensorLayout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    const Linear qkv = bind_linear(s, p + "self_attn.qkv_proj", c.q_dim() + 2 * c.kv_dim(), c.dim, false);
    L.wq = split_rows(qkv, 0, c.q_dim());
    L.wk = split_rows(qkv, c.q_dim(), c.kv_dim());
    L.wv = split_rows(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), false);
    L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    const Linear gate_up = bind_linear(s, p + "mlp.gate_up_proj", 2 * c.hidden_dim, c.dim, false);
    L.w_gate = split_rows(gate_up, 0, c.hidden_dim);
    L.w_up = split_rows(gate_up, c.hidden_dim, c.hidden_dim);
    L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, false);
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

const GgufNames kPhi3GgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_qkv", "self_attn.qkv_proj"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_up", "mlp.gate_up_proj"},
     {"ffn_down", "mlp.down_proj"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

// The layer is Llama's once the fused projections are split at load.
extern const Family kPhi3Family = {"phi3",         "phi3",          "Phi3ForCausalLM", "phi3",       phi3_from_hf,
                                   phi3_from_gguf, &kPhi3GgufNames, bind_phi3,         forward_llama};

}  // namespace kvlm
