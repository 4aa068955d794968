// Phi-2 (PhiForCausalLM, model_type "phi"): one LayerNorm (with bias) per block whose output
// feeds attention and the MLP in parallel, both added to the residual stream; q, k, v, the output
// projection (dense), the GELU MLP (fc1, fc2) and the LM head all carry biases; partial rotary
// embeddings (partial_rotary_factor, rotate-half); optional LayerNorm of q and k per head
// (qk_layernorm, one weight and bias shared by the heads).
#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig phi2_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = "phi2";
  read_hf_shapes(r, c, /*head_dim_key=*/false);
  c.norm_eps = r.number_or("layer_norm_eps", 1e-5f);
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  r.check_activation("hidden_act", "gelu_new", "gelu_pytorch_tanh");
  c.rope = RopeKind::RotateHalf;
  c.rope_theta = r.number_or("rope_theta", 10000.0f);
  c.rope_dims = c.head_dim / 2;  // PhiConfig's default factor, 0.5
  read_hf_rope(r, c, /*partial_rotary=*/true);
  c.qk_norm = r.boolean_or("qk_layernorm", false) ? QkNorm::PerHead : QkNorm::None;
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.bos_id = r.integer_or("bos_token_id", 1);
  c.eos_id = r.integer_or("eos_token_id", 2);
  c.qkv_bias = c.o_bias = c.mlp_bias = 1;
  c.parallel_residual = true;
  return c;
}

void phi2_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_epsilon").as_float("layer_norm_epsilon"));
  c.rope = RopeKind::RotateHalf;
  read_gguf_rope(g, p, c);
  c.parallel_residual = true;
}

void bind_phi2(const TensorSource& s, Model& m, TensorLayout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    L.attn_norm_bias = s.read_f32(p + "input_layernorm.bias", {c.dim});
    if (s.has(p + "self_attn.qkv_proj.weight")) {  // llama.cpp's converter may fuse them
      const Linear qkv = bind_linear(s, p + "self_attn.qkv_proj", c.q_dim() + 2 * c.kv_dim(), c.dim, true);
      L.wq = split_rows(qkv, 0, c.q_dim());
      L.wk = split_rows(qkv, c.q_dim(), c.kv_dim());
      L.wv = split_rows(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    } else {
      L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, true);
      L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, true);
      L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, true);
    }
    L.wo = bind_linear(s, p + "self_attn.dense", c.dim, c.q_dim(), true);
    if (c.qk_norm == QkNorm::PerHead) {
      L.q_norm = s.read_f32(p + "self_attn.q_layernorm.weight", {c.head_dim});
      L.q_norm_bias = s.read_f32(p + "self_attn.q_layernorm.bias", {c.head_dim});
      L.k_norm = s.read_f32(p + "self_attn.k_layernorm.weight", {c.head_dim});
      L.k_norm_bias = s.read_f32(p + "self_attn.k_layernorm.bias", {c.head_dim});
    }
    L.w_up = bind_linear(s, p + "mlp.fc1", c.hidden_dim, c.dim, true);
    L.w_down = bind_linear(s, p + "mlp.fc2", c.dim, c.hidden_dim, true);
  }
  m.final_norm = s.read_f32("model.final_layernorm.weight", {c.dim});
  m.final_norm_bias = s.read_f32("model.final_layernorm.bias", {c.dim});
  if (c.tied_embeddings)
    bind_lm_head(s, "model.embed_tokens", m);
  else
    m.lm_head = bind_linear(s, "lm_head", c.vocab_size, c.dim, true);
}

void forward_phi2(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, h, no_up, tmp] = blocks::activations(s, c, /*gated=*/false);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.layer_norm(x, L.attn_norm.data(), L.attn_norm_bias.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    if (c.qk_norm == QkNorm::PerHead) {
      s.ops.layer_norm(q, L.q_norm.data(), L.q_norm_bias.data(), q, n * c.n_heads, c.head_dim, c.norm_eps);
      s.ops.layer_norm(k, L.k_norm.data(), L.k_norm_bias.data(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    blocks::gelu_mlp(s, L, xn, h, tmp);  // the same normed input as attention
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::layer_norm_head(s, m, x, tmp, xn);
}

const GgufNames kPhi2GgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_qkv", "self_attn.qkv_proj"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_output", "self_attn.dense"},
     {"ffn_up", "mlp.fc1"},
     {"ffn_down", "mlp.fc2"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.final_layernorm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kPhi2Family = {"phi2",         "phi",           "PhiForCausalLM", "phi2",      phi2_from_hf,
                                   phi2_from_gguf, &kPhi2GgufNames, bind_phi2,        forward_phi2};

}  // namespace kvlm
