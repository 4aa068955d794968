// GPT-Neo (GPTNeoForCausalLM): GPT-2's blocks with separate q/k/v projections (no bias), no score
// scaling, and local (windowed) and global layers listed by attention_types. No GGUF reader.
#include "model/bind_weights.h"
#include "model/family.h"

namespace kvlm {

namespace {

ModelConfig gpt_neo_from_hf(const HfReader& r) {
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
  r.check_activation("activation_function", "gelu_new", "gelu_pytorch_tanh");
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
  std::string p = gpt_prefix(s);
  bind_learned_embeddings(s, p, m);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    std::string lp = p + "h." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    bind_gpt_norms_and_mlp(s, lp, c, L, /*conv=*/false);
    std::string a = lp + "attn.attention.";
    L.wq = bind_linear(s, a + "q_proj", c.dim, c.dim, false);
    L.wk = bind_linear(s, a + "k_proj", c.dim, c.dim, false);
    L.wv = bind_linear(s, a + "v_proj", c.dim, c.dim, false);
    L.wo = bind_linear(s, a + "out_proj", c.dim, c.dim, true);
  }
  if (!c.tied_embeddings) m.lm_head = bind_linear(s, "lm_head", c.vocab_size, c.dim, false);
}

}  // namespace

extern const Family kGptNeoFamily = {"gpt_neo", "gpt_neo", "GPTNeoForCausalLM", nullptr, gpt_neo_from_hf,
                                     nullptr,   nullptr,   bind_gpt_neo};

}  // namespace kvlm
