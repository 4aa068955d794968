// Granite (GraniteForCausalLM): Llama with four multipliers: embedding_multiplier on the token
// embeddings, residual_multiplier on each attention and MLP output before it joins the residual
// stream, attention_multiplier as the score scale (instead of 1/sqrt(head_dim)), and logits
// divided by logits_scaling. GGUF: granite.{embedding_scale, residual_scale, attention.scale,
// logit_scale}; llama.cpp's converter permutes q/k as for llama.
#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig granite_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "granite");
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = r.boolean_or("mlp_bias", false);
  c.embedding_scale = r.number_or("embedding_multiplier", 1.0f);
  c.residual_scale = r.number_or("residual_multiplier", 1.0f);
  c.attn_scale = r.number_or("attention_multiplier", 1.0f);
  c.logit_divisor = r.number_or("logits_scaling", 1.0f);
  return c;
}

void granite_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::AdjacentPairs;
  // llama.cpp's defaults when a key is absent: 1, except the score scale (1/sqrt(head_dim)).
  c.embedding_scale = static_cast<float>(gguf_float(g, p + "embedding_scale", 1.0));
  c.residual_scale = static_cast<float>(gguf_float(g, p + "residual_scale", 1.0));
  c.attn_scale = static_cast<float>(gguf_float(g, p + "attention.scale", 0.0));
  c.logit_divisor = static_cast<float>(gguf_float(g, p + "logit_scale", 1.0));
}

void forward_granite(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  s.ops.scale(x, c.embedding_scale, n, c.dim);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.scale(tmp, c.residual_scale, n, c.dim);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::swiglu_mlp(s, L, xn, gate, up, tmp);
    s.ops.scale(tmp, c.residual_scale, n, c.dim);
    s.ops.add(x, tmp, n, c.dim);
  }
  const blocks::Logits out = blocks::rms_head(s, m, x, tmp, xn);
  s.ops.scale(out.data, 1.0f / c.logit_divisor, out.rows, c.vocab_size);
}

}  // namespace

extern const Family kGraniteFamily = {"granite",        "granite",       "GraniteForCausalLM",
                                      "granite",        granite_from_hf, granite_from_gguf,
                                      &kLlamaGgufNames, bind_llama_like, forward_granite};

}  // namespace kvlm
