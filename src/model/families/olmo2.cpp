// OLMo 2 and OLMo 3 (Olmo2ForCausalLM, Olmo3ForCausalLM): no norms before attention and the MLP;
// RMSNorms on their outputs before each residual add instead (post_attention_layernorm,
// post_feedforward_layernorm), and an RMSNorm of all query heads at once and of all key heads
// (q_norm [q_dim], k_norm [kv_dim]) before RoPE. OLMo 3 adds sliding windows by layer_types
// (by default every layer but each 4th). llama.cpp writes both as "olmo2", windows as
// attention.sliding_window plus a per-layer sliding_window_pattern; rotate-half RoPE.
#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig olmo_from_hf(const HfReader& r, const char* arch, bool windows) {
  ModelConfig c = llama_like_from_hf(r, arch);
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = 0;
  c.qk_norm = QkNorm::Whole;
  c.input_norms = false;
  c.output_norms = true;
  if (windows) {
    const int window = r.integer_or("sliding_window", 4096);
    if (r.has("layer_types"))
      apply_layer_types(r, c, window);
    else  // transformers' default pattern
      for (int l = 0; l < static_cast<int>(c.layer_window.size()); ++l)
        c.layer_window[l] = (l + 1) % 4 != 0 ? window : 0;
  }
  return c;
}

ModelConfig olmo2_from_hf(const HfReader& r) { return olmo_from_hf(r, "olmo2", false); }
ModelConfig olmo3_from_hf(const HfReader& r) { return olmo_from_hf(r, "olmo3", true); }

void olmo2_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
  c.qk_norm = QkNorm::Whole;
  c.input_norms = false;
  c.output_norms = true;
  const double swa_base = gguf_float(g, p + "rope.freq_base_swa", c.rope_theta);
  if (swa_base != c.rope_theta) c.rope_local_theta = static_cast<float>(swa_base);
  read_gguf_window_pattern(g, p, c, c.layer_window.empty() ? 0 : c.layer_window[0]);
}

void bind_olmo2(const TensorSource& s, Model& m, TensorLayout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  const bool bias = has_bias(s, c.qkv_bias, "model.layers.0.self_attn.q_proj.bias", "attention_bias");
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, bias);
    L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, bias);
    L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, bias);
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), bias);
    L.q_norm = s.read_f32(p + "self_attn.q_norm.weight", {c.q_dim()});
    L.k_norm = s.read_f32(p + "self_attn.k_norm.weight", {c.kv_dim()});
    L.post_attn_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    L.w_gate = bind_linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, false);
    L.w_up = bind_linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, false);
    L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, false);
    L.post_mlp_norm = s.read_f32(p + "post_feedforward_layernorm.weight", {c.dim});
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

void forward_olmo2(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    blocks::qkv(s, L, x, q, k, v);
    s.ops.rms_norm(q, L.q_norm.data(), q, n, c.q_dim(), c.norm_eps);
    s.ops.rms_norm(k, L.k_norm.data(), k, n, c.kv_dim(), c.norm_eps);
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.rms_norm(tmp, L.post_attn_norm.data(), xn, n, c.dim, c.norm_eps);
    s.ops.add(x, xn, n, c.dim);
    blocks::swiglu_mlp(s, L, x, gate, up, tmp);
    s.ops.rms_norm(tmp, L.post_mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    s.ops.add(x, xn, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

const GgufNames kOlmo2GgufNames = {
    "model.layers.",
    {{"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_q_norm", "self_attn.q_norm"},
     {"attn_k_norm", "self_attn.k_norm"},
     {"attn_output", "self_attn.o_proj"},
     {"post_attention_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"},
     {"post_ffw_norm", "post_feedforward_layernorm"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kOlmo2Family = {"olmo2",         "olmo2",          "Olmo2ForCausalLM", "olmo2",      olmo2_from_hf,
                                    olmo2_from_gguf, &kOlmo2GgufNames, bind_olmo2,         forward_olmo2};
// GGUF files of OLMo 3 say "olmo2" (llama.cpp runs both as one architecture).
extern const Family kOlmo3Family = {"olmo3", "olmo3", "Olmo3ForCausalLM", nullptr,      olmo3_from_hf,
                                    nullptr, nullptr, bind_olmo2,         forward_olmo2};

}  // namespace kvlm
