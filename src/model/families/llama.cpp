// Llama (LlamaForCausalLM; llama2.c checkpoints too): RMSNorm, SwiGLU, RoPE, grouped-query
// attention, optional biases (attention_bias, mlp_bias), Llama 3 / linear RoPE scaling.
#include "model/families/llama.h"

#include "model/bind_weights.h"
#include "model/blocks.h"
#include "model/gguf_model.h"

namespace kvlm {

void read_hf_shapes(const HfReader& r, ModelConfig& c, bool head_dim_key, int head_dim_default) {
  c.dim = r.integer("hidden_size");
  c.hidden_dim = r.integer("intermediate_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer_or("num_key_value_heads", c.n_heads);
  if (c.n_heads <= 0) fail(r.label, ": num_attention_heads must be positive");
  const int split = c.dim / c.n_heads;
  c.head_dim = head_dim_key ? r.integer_or("head_dim", head_dim_default > 0 ? head_dim_default : split) : split;
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer("max_position_embeddings");
  c.layer_window.assign(c.n_layers > 0 && c.n_layers <= 1024 ? c.n_layers : 0, 0);
}

ModelConfig llama_like_from_hf(const HfReader& r, const char* arch, bool partial_rotary, bool yarn) {
  ModelConfig c;
  c.arch = arch;
  read_hf_shapes(r, c, /*head_dim_key=*/true);
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6f);
  c.rope = RopeKind::RotateHalf;
  c.rope_theta = r.number_or("rope_theta", 10000.0f);
  c.norm = NormKind::RMSNorm;
  c.mlp = MlpKind::SwiGLU;
  r.check_activation("hidden_act", "silu", "swish");
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.bos_id = r.integer_or("bos_token_id", 1);
  c.eos_id = r.integer_or("eos_token_id", 2);
  read_hf_rope(r, c, partial_rotary, yarn);
  return c;
}

namespace {

// partial_rotary_factor: the fraction of each head that rotates (transformers rounds down).
void read_rotary_fraction(const HfReader& s, ModelConfig& c) {
  if (!s.has("partial_rotary_factor")) return;
  const float f = s.number_or("partial_rotary_factor", 1.0f);
  if (!(f > 0.0f && f <= 1.0f)) fail(s.label, ": partial_rotary_factor must be in (0, 1]");
  const int rot = static_cast<int>(c.head_dim * f);
  if (rot % 2) fail(s.label, ": partial_rotary_factor rotates ", rot, " values of each head; kvlm needs an even count");
  c.rope_dims = rot == c.head_dim ? 0 : rot;
}

// One rope_parameters / rope_scaling object: theta, the rotated fraction and the scaling kvlm
// implements.
void read_rope_object(const HfReader& s, ModelConfig& c, const char* key) {
  c.rope_theta = s.number_or("rope_theta", c.rope_theta);
  read_rotary_fraction(s, c);
  std::string type = s.string_or("rope_type", s.string_or("type", ""));
  if (type == "default") type = "";
  if (type != "" && type != "linear" && type != "llama3" && type != "yarn")
    fail(s.label, ": unsupported rope scaling type '", type, "' in ", key, " (supported: linear, llama3)");
  c.rope_scaling = type;
  c.rope_factor = s.number_or("factor", 1.0f);
  c.rope_low_freq_factor = s.number_or("low_freq_factor", 1.0f);
  c.rope_high_freq_factor = s.number_or("high_freq_factor", 4.0f);
  c.rope_original_max_pos = s.integer_or("original_max_position_embeddings", 8192);
  if (!(c.rope_factor > 0) || !(c.rope_high_freq_factor > c.rope_low_freq_factor) || c.rope_original_max_pos <= 0)
    fail(s.label, ": rope scaling values out of range");
  if (type != "yarn") return;
  c.rope_beta_fast = s.number_or("beta_fast", 32.0f);
  c.rope_beta_slow = s.number_or("beta_slow", 1.0f);
  c.rope_yarn_truncate = s.boolean_or("truncate", true);
  // The attention factor as transformers derives it: given, or from mscale and mscale_all_dim,
  // or 0.1 ln(factor) + 1.
  auto mscale = [&](double m) { return c.rope_factor <= 1 ? 1.0 : 0.1 * m * std::log(c.rope_factor) + 1.0; };
  const float ms = s.number_or("mscale", 0.0f), ms_all = s.number_or("mscale_all_dim", 0.0f);
  c.rope_attn_factor = static_cast<float>(ms != 0 && ms_all != 0 ? mscale(ms) / mscale(ms_all) : mscale(1.0));
  c.rope_attn_factor = s.number_or("attention_factor", c.rope_attn_factor);
}

// transformers >= 5 keys rope_parameters by layer type where they differ (Gemma 3, OLMo 3):
// "full_attention" (theta and scaling) and "sliding_attention" (a base of its own, no scaling).
void read_rope_by_layer_type(const HfReader& r, const nlohmann::json& rp, ModelConfig& c) {
  for (const char* type : {"full_attention", "sliding_attention"})
    if (rp.contains(type) && !rp[type].is_object()) fail(r.label, ": rope_parameters.", type, " must be an object");
  if (rp.contains("full_attention")) read_rope_object(HfReader{rp["full_attention"], r.label}, c, "rope_parameters");
  if (rp.contains("sliding_attention")) {
    ModelConfig local = c;
    read_rope_object(HfReader{rp["sliding_attention"], r.label}, local, "rope_parameters.sliding_attention");
    if (!local.rope_scaling.empty())
      fail(r.label, ": rope scaling on sliding layers is not supported (only their base, rope_theta)");
    if (local.rope_theta != c.rope_theta) c.rope_local_theta = local.rope_theta;
  }
}

void read_hf_rope_parts(const HfReader& r, ModelConfig& c) {
  read_rotary_fraction(r, c);
  const int top_dims = c.rope_dims;
  // transformers >= 5 nests theta and scaling in rope_parameters; older configs use
  // rope_theta plus rope_scaling.
  if (r.has("rope_parameters") && r.j["rope_parameters"].is_object() &&
      (r.j["rope_parameters"].contains("full_attention") || r.j["rope_parameters"].contains("sliding_attention"))) {
    read_rope_by_layer_type(r, r.j["rope_parameters"], c);
    return;
  }
  const char* scaling_key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  // Both spellings at once must agree: one silently winning over the other hides a wrong model.
  if (r.has("rope_parameters") && r.has("rope_scaling") && r.j["rope_scaling"] != r.j["rope_parameters"])
    fail(r.label, ": rope_scaling and rope_parameters disagree; keep one");
  if (r.has("rope_parameters") && r.has("rope_theta") && r.j["rope_parameters"].is_object() &&
      r.j["rope_parameters"].contains("rope_theta") && r.j["rope_parameters"]["rope_theta"] != r.j["rope_theta"])
    fail(r.label, ": rope_theta and rope_parameters.rope_theta disagree; keep one");
  if (r.has(scaling_key)) {
    const nlohmann::json& rs = r.j[scaling_key];
    if (!rs.is_object()) fail(r.label, ": ", scaling_key, " must be an object");
    read_rope_object(HfReader{rs, r.label}, c, scaling_key);
    if (r.has("partial_rotary_factor") && rs.contains("partial_rotary_factor") && c.rope_dims != top_dims)
      fail(r.label, ": partial_rotary_factor and ", scaling_key, ".partial_rotary_factor disagree; keep one");
  }
}

}  // namespace

void read_hf_rope(const HfReader& r, ModelConfig& c, bool partial_rotary, bool yarn) {
  read_hf_rope_parts(r, c);
  if (c.rope_scaling == "yarn" && !yarn)
    fail(r.label, ": unsupported rope scaling type 'yarn' for model_type ", r.string_or("model_type", "?"),
         " (supported: linear, llama3)");
  if (c.rope_dims != 0 && !partial_rotary)
    fail(r.label, ": partial_rotary_factor (rotating part of each head) is not supported for model_type ",
         r.string_or("model_type", "?"));
}

void apply_layer_types(const HfReader& r, ModelConfig& c, int window) {
  if (!r.has("layer_types") || window <= 0) return;
  const nlohmann::json& lt = r.j["layer_types"];
  if (!lt.is_array() || static_cast<int>(lt.size()) != c.n_layers)
    fail(r.label, ": layer_types must list one entry per layer");
  for (int i = 0; i < c.n_layers; ++i) c.layer_window[i] = lt[i] == "sliding_attention" ? window : 0;
}

void read_gguf_rope(const GgufFile& g, const std::string& p, ModelConfig& c, bool yarn) {
  c.rope_theta = static_cast<float>(gguf_float(g, p + "rope.freq_base", 10000.0));
  if (g.has(p + "rope.dimension_count")) {  // partial rotary where below head_dim
    const int n_rot = gguf_int(g, p + "rope.dimension_count", 2, 1 << 20);
    if (n_rot > c.head_dim || n_rot % 2)
      fail(g.path, ": ", p, "rope.dimension_count = ", n_rot, " must be even and at most head_dim ", c.head_dim);
    c.rope_dims = n_rot == c.head_dim ? 0 : n_rot;
  }
  std::string type =
      g.has(p + "rope.scaling.type") ? g.get(p + "rope.scaling.type").as_string("rope.scaling.type") : "";
  double factor = gguf_float(g, p + "rope.scaling.factor", 0.0);
  if (g.has(p + "rope.scale_linear")) {  // older files: a linear factor and no type
    if (!type.empty() && type != "linear") fail(g.path, ": rope.scale_linear conflicts with rope.scaling.type ", type);
    type = "linear";
    factor = gguf_float(g, p + "rope.scale_linear", 1.0);
  }
  if (type == "none" || (type == "linear" && factor == 1.0)) type = "";
  if (type == "yarn" && yarn) {
    // llama.cpp's YaRN: the band's ends rounded outward, the attention factor
    // (1 + 0.1 ln factor) times rope.scaling.attn_factor.
    if (!(factor > 1)) fail(g.path, ": ", p, "rope.scaling.factor = ", factor, " must exceed 1 for YaRN");
    c.rope_scaling = "yarn";
    c.rope_factor = static_cast<float>(factor);
    c.rope_original_max_pos = gguf_int(g, p + "rope.scaling.original_context_length", 1, 1 << 30);
    c.rope_beta_fast = static_cast<float>(gguf_float(g, p + "rope.scaling.yarn_beta_fast", 32.0));
    c.rope_beta_slow = static_cast<float>(gguf_float(g, p + "rope.scaling.yarn_beta_slow", 1.0));
    c.rope_yarn_truncate = true;
    c.rope_attn_factor =
        static_cast<float>((1.0 + 0.1 * std::log(factor)) * gguf_float(g, p + "rope.scaling.attn_factor", 1.0));
    return;
  }
  if (!type.empty() && type != "linear")
    fail(g.path, ": ", p, "rope.scaling.type '", type, "' is not supported (supported: none, linear)");
  if (type == "linear") {
    if (!(factor > 0)) fail(g.path, ": ", p, "rope.scaling.factor = ", factor, " must be positive");
    c.rope_scaling = "linear";
    c.rope_factor = static_cast<float>(factor);
  }
  double attn_factor = gguf_float(g, p + "rope.scaling.attn_factor", 1.0);
  if (attn_factor != 1.0)
    fail(g.path, ": ", p, "rope.scaling.attn_factor = ", attn_factor, " is not supported (only 1)");
}

void llama_like_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c, bool yarn) {
  c.norm = NormKind::RMSNorm;
  c.mlp = MlpKind::SwiGLU;
  c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_rms_epsilon").as_float("rms_epsilon"));
  read_gguf_rope(g, p, c, yarn);
  if (g.tensors.has("rope_freqs.weight")) {  // Llama 3 rope scaling, as llama.cpp stores it
    if (c.head_dim <= 0 || c.head_dim > 1024 || c.head_dim % 2) fail(g.path, ": head_dim ", c.head_dim, " is invalid");
    const Buffer<float> divisors = g.tensors.read_f32("rope_freqs.weight", {c.rotary_dims() / 2});
    c.rope_freq_divisors.assign(divisors.begin(), divisors.end());
  }
}

void read_gguf_window_pattern(const GgufFile& g, const std::string& p, ModelConfig& c, int window) {
  if (!g.has(p + "attention.sliding_window_pattern")) return;
  const GgufValue& pattern = g.get(p + "attention.sliding_window_pattern");
  if (static_cast<int>(pattern.array.size()) != c.n_layers)
    fail(g.path, ": ", p, "attention.sliding_window_pattern must list one entry per layer");
  for (int l = 0; l < c.n_layers; ++l)
    c.layer_window[l] = pattern.array[l].as_bool("attention.sliding_window_pattern") ? window : 0;
}

const ExpertNames kMixtralExperts = {"block_sparse_moe.gate", "block_sparse_moe.experts.", "w1", "w3", "w2"};

void read_hf_experts(const HfReader& r, ModelConfig& c, int n_experts, int expert_hidden_dim) {
  c.n_experts = n_experts;
  c.expert_hidden_dim = expert_hidden_dim;
  c.experts_per_token = r.integer("num_experts_per_tok");
  if (n_experts <= 0 || c.experts_per_token <= 0 || c.experts_per_token > n_experts)
    fail(r.label, ": num_experts_per_tok = ", c.experts_per_token, " must be in 1..the expert count ", n_experts);
  c.layer_moe.assign(c.n_layers, 1);
}

void bind_llama_like(const TensorSource& s, Model& m, TensorLayout) { bind_llama_layers(s, m, kMixtralExperts); }

void bind_llama_layers(const TensorSource& s, Model& m, const ExpertNames& experts) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  bool qkv_bias = has_bias(s, c.qkv_bias, "model.layers.0.self_attn.q_proj.bias", "attention_bias");
  bool o_bias = has_bias(s, c.o_bias, "model.layers.0.self_attn.o_proj.bias", "attention_bias");
  bool mlp_bias = has_bias(s, c.mlp_bias, "model.layers.0.mlp.gate_proj.bias", "mlp_bias");
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, qkv_bias);
    L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), o_bias);
    L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    if (c.is_moe_layer(i)) {
      bind_experts(s, p, experts, c, L);
      continue;
    }
    L.w_gate = bind_linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, mlp_bias);
    L.w_up = bind_linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, mlp_bias);
    L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, mlp_bias);
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

void forward_llama(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    blocks::rope(s, m, l, q, c.n_heads);
    blocks::rope(s, m, l, k, c.n_kv_heads);
    s.attention(blocks::attention_params(c, l), q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::gated_mlp(s, c, l, L, xn, gate, up, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

const GgufNames kLlamaGgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"},
     {"ffn_gate_inp", "block_sparse_moe.gate"},
     {"ffn_gate_exps", "block_sparse_moe.experts.{e}.w1"},
     {"ffn_up_exps", "block_sparse_moe.experts.{e}.w3"},
     {"ffn_down_exps", "block_sparse_moe.experts.{e}.w2"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

namespace {

ModelConfig llama_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "llama");
  // All four attention projections share attention_bias; the MLP has its own flag.
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = r.boolean_or("mlp_bias", false);
  return c;
}

void llama_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  read_gguf_experts(g, p, c);        // Mixtral
  c.rope = RopeKind::AdjacentPairs;  // convert_hf_to_gguf.py permutes q/k rows to Meta's layout
}

}  // namespace

extern const Family kLlamaFamily = {"llama",         "llama",          "LlamaForCausalLM", "llama",      llama_from_hf,
                                    llama_from_gguf, &kLlamaGgufNames, bind_llama_like,    forward_llama};

}  // namespace kvlm
