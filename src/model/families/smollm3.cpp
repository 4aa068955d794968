// SmolLM3 (SmolLM3ForCausalLM): Llama whose every no_rope_layer_interval-th layer (by default the
// 4th, 8th, ...) has no positional encoding at all (NoPE), listed per layer by no_rope_layers;
// sliding windows by layer_types. llama.cpp's smollm3 hard-codes the interval 4 and, as for
// llama, its converter permutes q/k rows to adjacent pairs.
#include "model/blocks.h"
#include "model/families/llama.h"

namespace kvlm {

namespace {

ModelConfig smollm3_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "smollm3");
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = r.boolean_or("mlp_bias", false);
  if (r.has("no_rope_layers")) {
    const nlohmann::json& list = r.j["no_rope_layers"];
    if (!list.is_array() || static_cast<int>(list.size()) != c.n_layers)
      fail(r.label, ": no_rope_layers must list one entry per layer");
    for (const nlohmann::json& v : list) {
      if (!v.is_number_integer() || (v != 0 && v != 1)) fail(r.label, ": no_rope_layers entries must be 0 or 1");
      c.layer_rope.push_back(v.get<int>());
    }
  } else {
    const int every = r.integer_or("no_rope_layer_interval", 4);
    if (every <= 0) fail(r.label, ": no_rope_layer_interval must be positive");
    for (int l = 0; l < c.n_layers && l <= 1024; ++l) c.layer_rope.push_back((l + 1) % every != 0);
  }
  if (r.boolean_or("use_sliding_window", false) || r.has("layer_types")) {
    const int window = r.integer_or("sliding_window", 0);
    if (!r.has("layer_types"))  // transformers' default: the NoPE layers slide
      for (int l = 0; l < c.n_layers && l < static_cast<int>(c.layer_window.size()); ++l)
        c.layer_window[l] = c.layer_rope[l] ? 0 : window;
    apply_layer_types(r, c, window);
  }
  return c;
}

void smollm3_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::AdjacentPairs;
  for (int l = 0; l < c.n_layers; ++l) c.layer_rope.push_back((l + 1) % 4 != 0);  // llama.cpp's n_no_rope_layer_step
}

void forward_smollm3(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    if (c.layer_rope[l]) {
      blocks::rope(s, m, l, q, c.n_heads);
      blocks::rope(s, m, l, k, c.n_kv_heads);
    }
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::swiglu_mlp(s, L, xn, gate, up, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

}  // namespace

extern const Family kSmolLm3Family = {"smollm3",        "smollm3",       "SmolLM3ForCausalLM",
                                      "smollm3",        smollm3_from_hf, smollm3_from_gguf,
                                      &kLlamaGgufNames, bind_llama_like, forward_smollm3};

}  // namespace kvlm
