// StableLM (StableLmForCausalLM, StableLM 2 / Zephyr): LayerNorm with bias, SwiGLU, partial
// rotary (partial_rotary_factor, rotate-half), q/k/v biases (use_qkv_bias), a LayerNorm of each
// query and key head with that head's own weights (qk_layernorm), and either the sequential block
// or a parallel one (use_parallel_residual: attention and the MLP both read the input norm).
// GGUF "stablelm": the per-head norms stacked as attn_q_norm / attn_k_norm [heads][head_dim].
#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig stablelm_from_hf(const HfReader& r) {
  ModelConfig c;
  c.arch = "stablelm";
  read_hf_shapes(r, c, /*head_dim_key=*/false);
  c.norm_eps = r.number_or("layer_norm_eps", 1e-5f);
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::SwiGLU;
  r.check_activation("hidden_act", "silu", "swish");
  c.rope = RopeKind::RotateHalf;
  c.rope_theta = r.number_or("rope_theta", 10000.0f);
  c.rope_dims = c.head_dim / 4;  // StableLmConfig's default factor, 0.25
  read_hf_rope(r, c, /*partial_rotary=*/true);
  c.qkv_bias = r.boolean_or("use_qkv_bias", false);
  c.o_bias = c.mlp_bias = 0;
  c.qk_norm = r.boolean_or("qk_layernorm", false) ? QkNorm::EachHead : QkNorm::None;
  c.parallel_residual = r.boolean_or("use_parallel_residual", false);
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.bos_id = r.integer_or("bos_token_id", 0);
  c.eos_id = r.integer_or("eos_token_id", 0);
  return c;
}

void stablelm_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::SwiGLU;
  c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_epsilon").as_float("layer_norm_epsilon"));
  c.rope = RopeKind::RotateHalf;
  read_gguf_rope(g, p, c);
  c.parallel_residual =
      g.has(p + "use_parallel_residual") && g.get(p + "use_parallel_residual").as_bool("use_parallel_residual");
  if (g.tensors.has("blk.0.attn_q_norm.weight")) c.qk_norm = QkNorm::EachHead;
}

// Each head's norm weights, one after another: HF keeps one tensor per head, GGUF one stacked.
Buffer<float> head_norms(const TensorSource& s, const std::string& p, int heads, int head_dim) {
  if (s.has(p + ".weight")) {
    Buffer<float> w = s.read_f32(p + ".weight", {heads, head_dim});
    return w;
  }
  Buffer<float> w(static_cast<size_t>(heads) * head_dim);
  for (int h = 0; h < heads; ++h) {
    const Buffer<float> one = s.read_f32(p + ".norms." + std::to_string(h) + ".weight", {head_dim});
    std::copy(one.begin(), one.end(), w.begin() + static_cast<size_t>(h) * head_dim);
  }
  return w;
}

void bind_stablelm(const TensorSource& s, Model& m, TensorLayout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  const bool bias = has_bias(s, c.qkv_bias, "model.layers.0.self_attn.q_proj.bias", "use_qkv_bias");
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    L.attn_norm_bias = s.read_f32(p + "input_layernorm.bias", {c.dim});
    L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, bias);
    L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, bias);
    L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, bias);
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), false);
    if (c.qk_norm == QkNorm::EachHead) {
      L.q_norm = head_norms(s, p + "self_attn.q_layernorm", c.n_heads, c.head_dim);
      L.k_norm = head_norms(s, p + "self_attn.k_layernorm", c.n_kv_heads, c.head_dim);
    }
    if (!c.parallel_residual) {
      L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
      L.mlp_norm_bias = s.read_f32(p + "post_attention_layernorm.bias", {c.dim});
    }
    L.w_gate = bind_linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, false);
    L.w_up = bind_linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, false);
    L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, false);
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  m.final_norm_bias = s.read_f32("model.norm.bias", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

void forward_stablelm(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.layer_norm(x, L.attn_norm.data(), L.attn_norm_bias.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    if (c.qk_norm == QkNorm::EachHead) {
      s.ops.head_layer_norm(q, L.q_norm.data(), n, c.n_heads, c.head_dim, c.norm_eps);
      s.ops.head_layer_norm(k, L.k_norm.data(), n, c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    if (!c.parallel_residual)  // the MLP reads the stream after attention, through its own norm
      s.ops.layer_norm(x, L.mlp_norm.data(), L.mlp_norm_bias.data(), xn, n, c.dim, c.norm_eps);
    blocks::swiglu_mlp(s, L, xn, gate, up, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::layer_norm_head(s, m, x, tmp, xn);
}

const GgufNames kStableLmGgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_q_norm", "self_attn.q_layernorm"},
     {"attn_k_norm", "self_attn.k_layernorm"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kStableLmFamily = {"stablelm",          "stablelm",       "StableLmForCausalLM",
                                       "stablelm",          stablelm_from_hf, stablelm_from_gguf,
                                       &kStableLmGgufNames, bind_stablelm,    forward_stablelm};

}  // namespace kvlm
