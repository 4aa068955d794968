// Gemma 2 (Gemma2ForCausalLM) and Gemma 3 text (Gemma3ForCausalLM): RMSNorms whose weights count
// from 1 (HF stores w and multiplies by 1 + w; llama.cpp's converter stores 1 + w), sandwich
// norms (before and after attention and the MLP), GeGLU (gelu_tanh(gate) * up), embeddings scaled
// by sqrt(hidden_size), scores scaled by query_pre_attn_scalar^-1/2, sliding-window layers in a
// pattern (Gemma 2 every other layer, Gemma 3 five of six). Gemma 2 soft-caps the scores and the
// final logits (cap * tanh(x / cap)); Gemma 3 has a per-head q/k norm, its own RoPE base on the
// sliding layers (rope_local_base_freq) and RoPE scaling on the global ones.
#include <cmath>

#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

// A soft cap: transformers' class default when the key is absent, none when it is null.
float soft_cap(const HfReader& r, const char* key, float class_default) {
  if (!r.j.contains(key)) return class_default;
  return r.has(key) ? r.number_or(key, 0.0f) : 0.0f;
}

ModelConfig gemma_from_hf(const HfReader& r, const char* arch, int pattern, bool gemma3) {
  ModelConfig c;
  c.arch = arch;
  read_hf_shapes(r, c, /*head_dim_key=*/true, 256);  // transformers' default head_dim, whatever the width
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6f);
  c.norm = NormKind::RMSNorm;
  c.mlp = MlpKind::SwiGLU;  // gated: gate, up and down projections (the gate through GELU here)
  r.check_activation("hidden_activation", "gelu_pytorch_tanh", "gelu_new");
  if (r.has("hidden_act") && !r.has("hidden_activation"))  // old configs spelled it so
    r.check_activation("hidden_act", "gelu_pytorch_tanh", "gelu_new");
  if (r.boolean_or("use_bidirectional_attention", false))
    fail(r.label, ": use_bidirectional_attention (an encoder) is not supported");
  c.rope = RopeKind::RotateHalf;
  c.rope_theta = r.number_or("rope_theta", gemma3 ? 1e6f : 10000.0f);
  read_hf_rope(r, c);
  if (gemma3 && r.has("rope_local_base_freq")) {  // the spelling before rope_parameters by layer type
    const float local = r.number_or("rope_local_base_freq", 10000.0f);
    if (local != c.rope_theta) c.rope_local_theta = local;
  }
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  c.bos_id = r.integer_or("bos_token_id", 2);
  c.eos_id = r.integer_or("eos_token_id", 1);
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = 0;
  c.attn_scale = 1.0f / std::sqrt(r.number_or("query_pre_attn_scalar", 256.0f));
  c.attn_softcap = soft_cap(r, "attn_logit_softcapping", gemma3 ? 0.0f : 50.0f);
  c.final_softcap = soft_cap(r, "final_logit_softcapping", gemma3 ? 0.0f : 30.0f);
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.output_norms = true;
  if (gemma3) c.qk_norm = QkNorm::PerHead;
  const int window = r.integer_or("sliding_window", 4096);
  if (r.has("layer_types")) {
    apply_layer_types(r, c, window);
  } else {
    pattern = r.integer_or("sliding_window_pattern", pattern);
    if (pattern <= 0) fail(r.label, ": sliding_window_pattern must be positive");
    for (int l = 0; l < static_cast<int>(c.layer_window.size()); ++l)
      c.layer_window[l] = (l + 1) % pattern ? window : 0;
  }
  return c;
}

ModelConfig gemma2_from_hf(const HfReader& r) { return gemma_from_hf(r, "gemma2", 2, false); }
ModelConfig gemma3_from_hf(const HfReader& r) { return gemma_from_hf(r, "gemma3", 6, true); }

// llama.cpp's reading: windows in a pattern (attention.sliding_window_pattern, as a per-layer
// array or a period, else Gemma's own period), and a score scale it derives from the model's
// size, not from the file: 1/sqrt(head_dim), or for the 27B models 1/sqrt(hidden / heads).
void gemma_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c, int pattern, int layers_27b,
                     int default_window) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
  c.mlp = MlpKind::SwiGLU;
  c.attn_softcap = static_cast<float>(gguf_float(g, p + "attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(gguf_float(g, p + "final_logit_softcapping", 0.0));
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.output_norms = true;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_layers == layers_27b ? c.dim / c.n_heads : c.head_dim));
  const double swa_base = gguf_float(g, p + "rope.freq_base_swa", c.rope_theta);
  if (swa_base != c.rope_theta) c.rope_local_theta = static_cast<float>(swa_base);
  const int window = g.has(p + "attention.sliding_window") ? c.layer_window[0] : default_window;
  if (window == 0) return;
  const std::string key = p + "attention.sliding_window_pattern";
  if (g.has(key) && g.get(key).type == GgufType::ARRAY) {
    const GgufValue& v = g.get(key);
    if (static_cast<int>(v.array.size()) != c.n_layers) fail(g.path, ": ", key, " must list one entry per layer");
    for (int l = 0; l < c.n_layers; ++l) c.layer_window[l] = v.array[l].as_bool(key) ? window : 0;
    return;
  }
  if (g.has(key)) pattern = gguf_int(g, key, 1, 1 << 20);
  for (int l = 0; l < c.n_layers; ++l) c.layer_window[l] = l % pattern < pattern - 1 ? window : 0;
}

// Without attention.sliding_window llama.cpp gives Gemma 2 its 4096 and Gemma 3 no windows.
void gemma2_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  gemma_from_gguf(g, p, c, 2, 46, 4096);
}
void gemma3_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  gemma_from_gguf(g, p, c, 6, 62, 0);
  c.qk_norm = QkNorm::PerHead;
}

void bind_gemma(const TensorSource& s, Model& m, TensorLayout layout) {
  const ModelConfig& c = m.cfg;
  // HF's norms multiply by 1 + w; the GGUF converter already stored 1 + w.
  const float shift = layout == TensorLayout::HuggingFace ? 1.0f : 0.0f;
  auto norm = [&](const std::string& name, int n) {
    Buffer<float> w = s.read_f32(name, {n});
    for (float& x : w) x += shift;
    return w;
  };
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  const bool bias = has_bias(s, c.qkv_bias, "model.layers.0.self_attn.q_proj.bias", "attention_bias");
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = norm(p + "input_layernorm.weight", c.dim);
    L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, bias);
    L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, bias);
    L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, bias);
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), bias);
    if (c.qk_norm == QkNorm::PerHead) {
      L.q_norm = norm(p + "self_attn.q_norm.weight", c.head_dim);
      L.k_norm = norm(p + "self_attn.k_norm.weight", c.head_dim);
    }
    L.post_attn_norm = norm(p + "post_attention_layernorm.weight", c.dim);
    L.mlp_norm = norm(p + "pre_feedforward_layernorm.weight", c.dim);
    L.w_gate = bind_linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, false);
    L.w_up = bind_linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, false);
    L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, false);
    L.post_mlp_norm = norm(p + "post_feedforward_layernorm.weight", c.dim);
  }
  m.final_norm = norm("model.norm.weight", c.dim);
  bind_lm_head(s, "model.embed_tokens", m);
}

void forward_gemma(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  s.ops.scale(x, c.embedding_scale, n, c.dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    if (c.qk_norm == QkNorm::PerHead) {
      s.ops.rms_norm(q, L.q_norm.data(), q, n * c.n_heads, c.head_dim, c.norm_eps);
      s.ops.rms_norm(k, L.k_norm.data(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.rms_norm(tmp, L.post_attn_norm.data(), xn, n, c.dim, c.norm_eps);
    s.ops.add(x, xn, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    s.ops.linear(L.w_gate, xn, n, gate);
    s.ops.linear(L.w_up, xn, n, up);
    s.ops.gelu_mul(gate, up, n, c.hidden_dim);
    s.ops.linear(L.w_down, gate, n, tmp);
    s.ops.rms_norm(tmp, L.post_mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    s.ops.add(x, xn, n, c.dim);
  }
  const blocks::Logits out = blocks::rms_head(s, m, x, tmp, xn);
  if (c.final_softcap > 0) s.ops.softcap(out.data, c.final_softcap, out.rows, c.vocab_size);
}

const GgufNames kGemmaGgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_q_norm", "self_attn.q_norm"},
     {"attn_k_norm", "self_attn.k_norm"},
     {"attn_output", "self_attn.o_proj"},
     {"post_attention_norm", "post_attention_layernorm"},
     {"ffn_norm", "pre_feedforward_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"},
     {"post_ffw_norm", "post_feedforward_layernorm"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kGemma2Family = {"gemma2",         "gemma2",       "Gemma2ForCausalLM",
                                     "gemma2",         gemma2_from_hf, gemma2_from_gguf,
                                     &kGemmaGgufNames, bind_gemma,     forward_gemma};
extern const Family kGemma3Family = {"gemma3",         "gemma3_text",  "Gemma3ForCausalLM",
                                     "gemma3",         gemma3_from_hf, gemma3_from_gguf,
                                     &kGemmaGgufNames, bind_gemma,     forward_gemma};

}  // namespace kvlm
