#include "model/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"
#include "model/family.h"
#include "model/hf_reader.h"

namespace kvlm {

namespace {

using nlohmann::json;

// Keys some HF families use to change the arithmetic. Present at a value other than the neutral
// one and not read by the model's family, they are refused by name rather than silently ignored.
void refuse_unsupported_keys(const HfReader& r) {
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
    if (r.read_keys.count(k.key) || !r.has(k.key)) continue;
    const json& v = r.j[k.key];
    bool neutral = !std::isnan(k.neutral) && ((v.is_number() && v.get<double>() == k.neutral) ||
                                              (v.is_boolean() && static_cast<double>(v.get<bool>()) == k.neutral));
    if (!neutral)
      fail(r.label, ": config key '", k.key, "' = ", v.dump(), " changes the model's arithmetic and is not supported");
  }
}

// "architectures" must name the family's transformers class: another class under the same
// model_type may compute something else.
void check_architectures(const HfReader& r, const Family& f) {
  if (!r.has("architectures")) return;
  const json& a = r.j["architectures"];
  if (!a.is_array()) fail(r.label, ": 'architectures' must be a list of class names");
  for (const json& name : a) {
    std::string n = name.is_string() ? name.get<std::string>() : name.dump();
    if (n != f.hf_class)
      fail(r.label, ": architecture '", n, "' is not supported for model_type '", f.hf_model_type, "' (supported: ",
           f.hf_class, ")");
  }
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& label) {
  json j = parse_json_strict(text, label);
  if (!j.is_object()) fail(label, ": expected a JSON object");
  HfReader r{j, label};
  std::string type = r.string_or("model_type", "");
  if (type.empty()) fail(label, ": missing config key 'model_type'");
  const Family& family = family_for_hf_type(type, label);
  ModelConfig c = family.from_hf(r);
  refuse_unsupported_keys(r);
  check_architectures(r, family);
  if (c.attn_scale == 0.0f && c.head_dim > 0) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.validate(label);
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  return parse_hf_config(read_file(path), path);
}

}  // namespace kvlm
