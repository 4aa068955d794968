// GPT-2 (GPT2LMHeadModel): LayerNorm, GELU (tanh), learned positions, a fused q/k/v projection,
// biases everywhere. HF stores its matrices as Conv1D [in][out]; GGUF already as [out][in].
// Quirks honoured: scale_attn_weights, scale_attn_by_inverse_layer_idx, tie_word_embeddings.
#include <cmath>

#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/families/gpt2.h"
#include "model/gguf_model.h"

namespace kvlm {

ModelConfig gpt_like_from_hf(const HfReader& r, const char* arch, const GptKeyNames& k) {
  ModelConfig c;
  c.arch = arch;
  c.dim = r.integer(k.dim);
  c.n_layers = r.integer(k.layers);
  c.n_heads = r.integer(k.heads);
  c.n_kv_heads = c.n_heads;
  if (c.n_heads <= 0) fail(r.label, ": ", k.heads, " must be positive");
  c.head_dim = c.dim / c.n_heads;
  c.hidden_dim = r.integer_or(k.hidden, 4 * c.dim);
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer(k.positions);
  c.norm_eps = r.number_or("layer_norm_epsilon", 1e-5f);
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  r.check_activation("activation_function", "gelu_new", "gelu_pytorch_tanh");
  c.learned_positions = true;
  c.bos_id = r.integer_or("bos_token_id", 50256);
  c.eos_id = r.integer_or("eos_token_id", 50256);
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  return c;
}

void forward_gpt(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, h, no_up, tmp] = blocks::activations(s, c, /*gated=*/false);
  // Parameters rather than captures: clang 14 cannot capture structured bindings.
  auto norm = [&](const Buffer<float>& w, const Buffer<float>& b, const float* in, float* out) {
    s.ops.layer_norm(in, w.data(), b.empty() ? nullptr : b.data(), out, n, c.dim, c.norm_eps);
  };
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    norm(L.attn_norm, L.attn_norm_bias, x, xn);
    blocks::qkv(s, L, xn, q, k, v);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    norm(L.mlp_norm, L.mlp_norm_bias, x, xn);
    blocks::gelu_mlp(s, L, xn, h, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::layer_norm_head(s, m, x, tmp, xn);
}

namespace {

ModelConfig gpt2_from_hf(const HfReader& r) {
  ModelConfig c = gpt_like_from_hf(r, "gpt2", {"n_embd", "n_layer", "n_head", "n_inner", "n_positions"});
  c.layer_window.assign(c.n_layers > 0 && c.n_layers <= 1024 ? c.n_layers : 0, 0);
  // scale_attn_weights=false drops the 1/sqrt(d); the inverse-layer scale divides layer i by i+1.
  // reorder_and_upcast_attn changes only the precision HF computes in, not the math: accepted.
  if (!r.boolean_or("scale_attn_weights", true)) c.attn_scale = 1.0f;
  c.attn_scale_by_layer = r.boolean_or("scale_attn_by_inverse_layer_idx", false);
  r.boolean_or("reorder_and_upcast_attn", false);
  c.qkv_bias = c.o_bias = c.mlp_bias = 1;
  return c;
}

void gpt2_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  c.learned_positions = true;
  c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_epsilon").as_float("layer_norm_epsilon"));
  for (const char* k : {"rope.freq_base", "rope.dimension_count", "rope.scaling.type", "rope.scale_linear"})
    if (g.has(p + k)) fail(g.path, ": GPT-2 has no rotary embeddings, but the file sets ", p, k);
}

void bind_gpt2(const TensorSource& s, Model& m, TensorLayout layout) {
  const bool conv = layout == TensorLayout::HuggingFace;
  const ModelConfig& c = m.cfg;
  bind_gpt_like(s, m, conv, [&](const std::string& lp, LayerWeights& L) {
    Linear qkv = conv ? bind_conv1d(s, lp + "attn.c_attn", c.dim, 3 * c.dim)
                      : bind_linear(s, lp + "attn.c_attn", 3 * c.dim, c.dim, true);
    L.wq = split_rows(qkv, 0, c.dim);
    L.wk = split_rows(qkv, c.dim, c.dim);
    L.wv = split_rows(qkv, 2 * c.dim, c.dim);
    L.wo = conv ? bind_conv1d(s, lp + "attn.c_proj", c.dim, c.dim)
                : bind_linear(s, lp + "attn.c_proj", c.dim, c.dim, true);
  });
}

const GgufNames kGpt2GgufNames = {
    "h.",
    {{"attn_norm", "ln_1"},
     {"attn_qkv", "attn.c_attn"},
     {"attn_output", "attn.c_proj"},
     {"ffn_norm", "ln_2"},
     {"ffn_up", "mlp.c_fc"},
     {"ffn_down", "mlp.c_proj"}},
    {{"token_embd", "wte"}, {"position_embd", "wpe"}, {"output_norm", "ln_f"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kGpt2Family = {"gpt2",         "gpt2",          "GPT2LMHeadModel", "gpt2",     gpt2_from_hf,
                                   gpt2_from_gguf, &kGpt2GgufNames, bind_gpt2,         forward_gpt};

}  // namespace kvlm
