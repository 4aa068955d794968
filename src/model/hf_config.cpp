#include "model/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"

namespace kvlm {

namespace {

using nlohmann::json;

struct Reader {
  const json& j;
  const std::string& label;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int integer(const char* key) const {
    if (!has(key)) fail(label, ": missing config key '", key, "'");
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      fail(label, ": config key '", key, "' must be an integer");
    return v.get<int>();
  }
  int integer_or(const char* key, int fallback) const { return has(key) ? integer(key) : fallback; }
  float number_or(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(label, ": config key '", key, "' must be a number");
    return j[key].get<float>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(label, ": config key '", key, "' must be true or false");
    return j[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_string()) fail(label, ": config key '", key, "' must be a string");
    return j[key].get<std::string>();
  }
};

void check_activation(const Reader& r, const char* key, const std::string& expect_a, const std::string& expect_b) {
  std::string act = r.string_or(key, expect_a);
  if (act != expect_a && act != expect_b)
    fail(r.label, ": unsupported ", key, " '", act, "' (supported: ", expect_a, ", ", expect_b, ")");
}

ModelConfig llama_family(const Reader& r, const std::string& type) {
  ModelConfig c;
  c.arch = type;
  c.dim = r.integer("hidden_size");
  c.hidden_dim = r.integer("intermediate_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer_or("num_key_value_heads", c.n_heads);
  if (c.n_heads <= 0) fail(r.label, ": num_attention_heads must be positive");
  c.head_dim = r.integer_or("head_dim", c.dim / c.n_heads);
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer("max_position_embeddings");
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6f);
  c.rope = RopeKind::RotateHalf;
  c.rope_theta = r.number_or("rope_theta", 10000.0f);
  c.norm = NormKind::RMSNorm;
  c.mlp = MlpKind::SwiGLU;
  check_activation(r, "hidden_act", "silu", "swish");
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.bos_id = r.integer_or("bos_token_id", 1);
  c.eos_id = r.integer_or("eos_token_id", 2);
  // Biases as each HF class builds them: Llama from attention_bias / mlp_bias (all four
  // attention projections share one flag), Qwen2 always on q/k/v only, Mistral never.
  if (type == "llama") {
    c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
    c.mlp_bias = r.boolean_or("mlp_bias", false);
  } else {
    c.qkv_bias = type == "qwen2";
    c.o_bias = c.mlp_bias = 0;
  }
  int window = 0;
  if (type == "mistral") window = r.integer_or("sliding_window", 0);
  const bool qwen_windows = type == "qwen2" && r.boolean_or("use_sliding_window", false);
  if (qwen_windows || (type == "qwen2" && r.has("layer_types"))) window = r.integer_or("sliding_window", 0);
  c.layer_window.assign(c.n_layers > 0 && c.n_layers <= 1024 ? c.n_layers : 0, window);
  // Qwen2 without layer_types: only layers from max_window_layers on slide (HF's Qwen2Attention).
  if (qwen_windows && window > 0 && !r.has("layer_types")) {
    int first = r.integer_or("max_window_layers", 28);
    for (int i = 0; i < static_cast<int>(c.layer_window.size()); ++i) c.layer_window[i] = i >= first ? window : 0;
  }
  // transformers >= 5 nests theta and scaling in rope_parameters; older configs use
  // rope_theta plus rope_scaling.
  const char* scaling_key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  // Both spellings at once must agree: one silently winning over the other hides a wrong model.
  if (r.has("rope_parameters") && r.has("rope_scaling") && r.j["rope_scaling"] != r.j["rope_parameters"])
    fail(r.label, ": rope_scaling and rope_parameters disagree; keep one");
  if (r.has("rope_parameters") && r.has("rope_theta") && r.j["rope_parameters"].is_object() &&
      r.j["rope_parameters"].contains("rope_theta") && r.j["rope_parameters"]["rope_theta"] != r.j["rope_theta"])
    fail(r.label, ": rope_theta and rope_parameters.rope_theta disagree; keep one");
  if (r.has(scaling_key)) {
    const json& rs = r.j[scaling_key];
    if (!rs.is_object()) fail(r.label, ": ", scaling_key, " must be an object");
    Reader s{rs, r.label};
    c.rope_theta = s.number_or("rope_theta", c.rope_theta);
    std::string type = s.string_or("rope_type", s.string_or("type", ""));
    if (type == "default") type = "";
    if (type != "" && type != "linear" && type != "llama3")
      fail(r.label, ": unsupported rope scaling type '", type, "' (supported: linear, llama3)");
    c.rope_scaling = type;
    c.rope_factor = s.number_or("factor", 1.0f);
    c.rope_low_freq_factor = s.number_or("low_freq_factor", 1.0f);
    c.rope_high_freq_factor = s.number_or("high_freq_factor", 4.0f);
    c.rope_original_max_pos = s.integer_or("original_max_position_embeddings", 8192);
    if (!(c.rope_factor > 0) || !(c.rope_high_freq_factor > c.rope_low_freq_factor) || c.rope_original_max_pos <= 0)
      fail(r.label, ": rope scaling values out of range");
  }
  // Per-layer sliding windows: layer_types (transformers >= 5) or one window for all layers.
  if (r.has("layer_types") && window > 0) {
    const json& lt = r.j["layer_types"];
    if (!lt.is_array() || static_cast<int>(lt.size()) != c.n_layers)
      fail(r.label, ": layer_types must list one entry per layer");
    for (int i = 0; i < c.n_layers; ++i)
      c.layer_window[i] = lt[i] == "sliding_attention" ? window : 0;
  }
  return c;
}

ModelConfig gpt2(const Reader& r) {
  ModelConfig c;
  c.arch = "gpt2";
  c.dim = r.integer("n_embd");
  c.n_layers = r.integer("n_layer");
  c.n_heads = r.integer("n_head");
  c.n_kv_heads = c.n_heads;
  if (c.n_heads <= 0) fail(r.label, ": n_head must be positive");
  c.head_dim = c.dim / c.n_heads;
  c.hidden_dim = r.integer_or("n_inner", 4 * c.dim);
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer("n_positions");
  c.norm_eps = r.number_or("layer_norm_epsilon", 1e-5f);
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  check_activation(r, "activation_function", "gelu_new", "gelu_pytorch_tanh");
  c.learned_positions = true;
  c.bos_id = r.integer_or("bos_token_id", 50256);
  c.eos_id = r.integer_or("eos_token_id", 50256);
  c.layer_window.assign(c.n_layers > 0 && c.n_layers <= 1024 ? c.n_layers : 0, 0);
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  // scale_attn_weights=false drops the 1/sqrt(d); the inverse-layer scale divides layer i by i+1.
  // reorder_and_upcast_attn changes only the precision HF computes in, not the math: accepted.
  if (!r.boolean_or("scale_attn_weights", true)) c.attn_scale = 1.0f;
  c.attn_scale_by_layer = r.boolean_or("scale_attn_by_inverse_layer_idx", false);
  r.boolean_or("reorder_and_upcast_attn", false);
  c.qkv_bias = c.o_bias = c.mlp_bias = 1;
  return c;
}

ModelConfig gpt_neo(const Reader& r) {
  ModelConfig c;
  c.arch = "gpt_neo";
  c.dim = r.integer("hidden_size");
  c.n_layers = r.integer("num_layers");
  c.n_heads = r.integer("num_heads");
  c.n_kv_heads = c.n_heads;
  if (c.n_heads <= 0) fail(r.label, ": num_heads must be positive");
  c.head_dim = c.dim / c.n_heads;
  c.hidden_dim = r.integer_or("intermediate_size", 4 * c.dim);
  c.vocab_size = r.integer("vocab_size");
  c.max_seq_len = r.integer("max_position_embeddings");
  c.norm_eps = r.number_or("layer_norm_epsilon", 1e-5f);
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  check_activation(r, "activation_function", "gelu_new", "gelu_pytorch_tanh");
  c.learned_positions = true;
  c.attn_scale = 1.0f;  // GPT-Neo does not scale attention scores by 1/sqrt(d)
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  c.qkv_bias = 0;
  c.o_bias = c.mlp_bias = 1;
  c.bos_id = r.integer_or("bos_token_id", 50256);
  c.eos_id = r.integer_or("eos_token_id", 50256);
  int window = r.integer("window_size");
  // attention_types: [[["global", "local"], 12]] expands to the per-layer list.
  if (!r.has("attention_types") || !r.j["attention_types"].is_array())
    fail(r.label, ": missing config key 'attention_types'");
  for (const json& group : r.j["attention_types"]) {
    if (!group.is_array() || group.size() != 2 || !group[0].is_array() || !group[1].is_number_integer())
      fail(r.label, ": attention_types entries must be [[kinds...], repeat]");
    int repeat = group[1].get<int>();
    if (repeat < 0 || repeat > 1024) fail(r.label, ": attention_types repeat out of range");
    for (int i = 0; i < repeat; ++i)
      for (const json& kind : group[0]) {
        std::string k = kind.is_string() ? kind.get<std::string>() : "";
        if (k != "global" && k != "local") fail(r.label, ": unknown attention type '", kind.dump(), "'");
        if (c.layer_window.size() > 1024) fail(r.label, ": attention_types too long");
        c.layer_window.push_back(k == "local" ? window : 0);
      }
  }
  if (static_cast<int>(c.layer_window.size()) != c.n_layers)
    fail(r.label, ": attention_types lists ", c.layer_window.size(), " layers but num_layers is ", c.n_layers);
  return c;
}


// Keys some HF families use to change the arithmetic in ways kvlm does not implement. Present at
// a value other than the neutral one, they are refused by name rather than silently ignored.
void refuse_unsupported_keys(const Reader& r) {
  static const struct {
    const char* key;
    double neutral;  // NaN: only null/absent is neutral
  } keys[] = {
      {"partial_rotary_factor", 1.0}, {"rotary_pct", 1.0}, {"attn_logit_softcapping", NAN},
      {"final_logit_softcapping", NAN}, {"logit_scale", NAN}, {"logits_scaling", 1.0},
      {"embedding_multiplier", 1.0}, {"residual_multiplier", 1.0}, {"attention_multiplier", NAN},
      {"query_pre_attn_scalar", NAN}, {"num_local_experts", 0.0}, {"num_experts", 0.0},
      {"n_routed_experts", 0.0}, {"use_qk_norm", 0.0}, {"qk_layernorm", 0.0}, {"alibi", 0.0},
      {"use_parallel_residual", 0.0}, {"parallel_attn", 0.0}, {"scale_embedding", 0.0},
      {"use_mla", 0.0}, {"kv_lora_rank", NAN}, {"q_lora_rank", NAN}, {"attention_sink", 0.0}};
  for (const auto& k : keys) {
    if (!r.has(k.key)) continue;
    const json& v = r.j[k.key];
    bool neutral = !std::isnan(k.neutral) && ((v.is_number() && v.get<double>() == k.neutral) ||
                                              (v.is_boolean() && static_cast<double>(v.get<bool>()) == k.neutral));
    if (!neutral)
      fail(r.label, ": config key '", k.key, "' = ", v.dump(), " changes the model's arithmetic and is not supported");
  }
}

// The HF class each supported model_type loads as; any other class name is refused by name.
void check_architectures(const Reader& r, const std::string& type) {
  static const std::pair<const char*, const char*> classes[] = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"gpt2", "GPT2LMHeadModel"}, {"gpt_neo", "GPTNeoForCausalLM"}};
  if (!r.has("architectures")) return;
  const json& a = r.j["architectures"];
  if (!a.is_array()) fail(r.label, ": 'architectures' must be a list of class names");
  for (const json& name : a) {
    std::string n = name.is_string() ? name.get<std::string>() : name.dump();
    bool ok = false;
    for (const auto& [t, cls] : classes) ok = ok || (t == type && n == cls);
    if (!ok)
      fail(r.label, ": architecture '", n, "' is not supported for model_type '", type,
           "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel, GPTNeoForCausalLM)");
  }
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& label) {
  json j = parse_json_strict(text, label);
  if (!j.is_object()) fail(label, ": expected a JSON object");
  Reader r{j, label};
  std::string type = r.string_or("model_type", "");
  if (type.empty()) fail(label, ": missing config key 'model_type'");
  refuse_unsupported_keys(r);
  ModelConfig c;
  if (type == "llama" || type == "mistral" || type == "qwen2")
    c = llama_family(r, type);
  else if (type == "gpt2")
    c = gpt2(r);
  else if (type == "gpt_neo")
    c = gpt_neo(r);
  else
    fail(label, ": unsupported model_type '", type, "' (supported: llama, mistral, qwen2, gpt2, gpt_neo)");
  check_architectures(r, type);
  if (c.attn_scale == 0.0f && c.head_dim > 0) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.validate(label);
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  return parse_hf_config(read_file(path), path);
}

}  // namespace kvlm
