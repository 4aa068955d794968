// GPT-Neo (GPTNeoForCausalLM): GPT-2's blocks with separate q/k/v projections (no bias), no score
// scaling, and local (windowed) and global layers listed by attention_types. No GGUF reader.
#include "model/bind_weights.h"
#include "model/families/gpt2.h"

namespace kvlm {

namespace {

ModelConfig gpt_neo_from_hf(const HfReader& r) {
  ModelConfig c = gpt_like_from_hf(
      r, "gpt_neo", {"hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"});
  c.attn_scale = 1.0f;  // GPT-Neo does not scale attention scores by 1/sqrt(d)
  c.qkv_bias = 0;
  c.o_bias = c.mlp_bias = 1;
  int window = r.integer("window_size");
  // attention_types: [[["global", "local"], 12]] expands to the per-layer list.
  if (!r.has("attention_types") || !r.j["attention_types"].is_array())
    fail(r.label, ": missing config key 'attention_types'");
  for (const nlohmann::json& group : r.j["attention_types"]) {
    if (!group.is_array() || group.size() != 2 || !group[0].is_array() || !group[1].is_number_integer())
      fail(r.label, ": attention_types entries must be [[kinds...], repeat]");
    int repeat = group[1].get<int>();
    if (repeat < 0 || repeat > 1024) fail(r.label, ": attention_types repeat out of range");
    for (int i = 0; i < repeat; ++i)
      for (const nlohmann::json& kind : group[0]) {
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

void bind_gpt_neo(const TensorSource& s, Model& m, TensorLayout) {
  const ModelConfig& c = m.cfg;
  bind_gpt_like(s, m, /*conv=*/false, [&](const std::string& lp, LayerWeights& L) {
    const std::string a = lp + "attn.attention.";
    L.wq = bind_linear(s, a + "q_proj", c.dim, c.dim, false);
    L.wk = bind_linear(s, a + "k_proj", c.dim, c.dim, false);
    L.wv = bind_linear(s, a + "v_proj", c.dim, c.dim, false);
    L.wo = bind_linear(s, a + "out_proj", c.dim, c.dim, true);
  });
}

}  // namespace

extern const Family kGptNeoFamily = {"gpt_neo", "gpt_neo", "GPTNeoForCausalLM", nullptr,    gpt_neo_from_hf,
                                     nullptr,   nullptr,   bind_gpt_neo,        forward_gpt};

}  // namespace kvlm
