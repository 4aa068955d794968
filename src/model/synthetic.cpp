#include "model/synthetic.h"

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"

namespace kvlm {

namespace {

ModelConfig gpt2_shape(int layers, int dim, int heads, int ctx) {
  ModelConfig c;
  c.arch = "gpt2";
  c.dim = dim;
  c.hidden_dim = 4 * dim;
  c.n_layers = layers;
  c.n_heads = c.n_kv_heads = heads;
  c.head_dim = dim / heads;
  c.vocab_size = 50257;
  c.max_seq_len = ctx;
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::GeluTanh;
  c.learned_positions = true;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.layer_window.assign(layers, 0);
  c.bos_id = c.eos_id = 50256;
  return c;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Normal(0, std) by Box-Muller from a counter-based stream: chunks fill in parallel and the
// result does not depend on the thread count.
void fill_normal(Buffer<float>& v, size_t n, float stddev, uint64_t seed) {
  v.resize(n);
  ThreadPool::global().parallel_for((n + 4095) / 4096, [&](size_t b, size_t e) {
    for (size_t chunk = b; chunk < e; ++chunk) {
      uint64_t s = seed * 0x100000001b3ull + chunk;
      for (size_t i = chunk * 4096; i < std::min(n, (chunk + 1) * 4096); i += 2) {
        double u1 = (splitmix(s) >> 11) * 0x1.0p-53, u2 = (splitmix(s) >> 11) * 0x1.0p-53;
        double r = std::sqrt(-2.0 * std::log(u1 + 1e-300)), th = 6.283185307179586 * u2;
        v[i] = static_cast<float>(r * std::cos(th) * stddev);
        if (i + 1 < n) v[i + 1] = static_cast<float>(r * std::sin(th) * stddev);
      }
    }
  });
}

}  // namespace

ModelConfig llama_shape(int layers, int dim, int hidden, int heads, int kv_heads, int head_dim, int vocab, int ctx) {
  ModelConfig c;
  c.arch = "llama";
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = vocab;
  c.max_seq_len = ctx;
  c.rope = RopeKind::RotateHalf;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  c.tied_embeddings = false;
  c.layer_window.assign(c.n_layers, 0);
  return c;
}

std::vector<std::string> preset_names() { return {"distilgpt2", "gpt2", "gpt-neo-1.3B", "tinyllama-1.1b"}; }

ModelConfig preset_config(const std::string& name) {
  if (name == "distilgpt2") return gpt2_shape(6, 768, 12, 1024);
  if (name == "gpt2") return gpt2_shape(12, 768, 12, 1024);
  if (name == "gpt-neo-1.3B") {
    ModelConfig c = gpt2_shape(24, 2048, 16, 2048);
    c.arch = "gpt_neo";
    c.attn_scale = 1.0f;
    for (int l = 0; l < c.n_layers; ++l) c.layer_window[l] = l % 2 ? 256 : 0;  // global, local alternate
    return c;
  }
  if (name == "tinyllama-1.1b") return llama_shape(22, 2048, 5632, 32, 4, 64, 32000, 2048);
  std::string all;
  for (auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
  fail("unknown preset '", name, "' (known: ", all, ")");
}

std::unique_ptr<Model> synthetic_model(const ModelConfig& cfg, uint64_t seed) {
  cfg.validate("synthetic model");
  auto m = std::make_unique<Model>();
  m->cfg = cfg;
  const float sd = 0.02f;
  uint64_t k = seed * 1000;
  auto lin = [&](int out, int in, bool bias) {
    Linear l;
    l.out = out;
    l.in = in;
    fill_normal(l.w, static_cast<size_t>(out) * in, sd, ++k);
    if (bias) l.b.assign(out, 0.0f);
    return l;
  };
  const bool gpt = cfg.norm == NormKind::LayerNorm;
  fill_normal(m->tok_emb, static_cast<size_t>(cfg.vocab_size) * cfg.dim, sd, ++k);
  if (cfg.learned_positions) fill_normal(m->pos_emb, static_cast<size_t>(cfg.max_seq_len) * cfg.dim, sd, ++k);
  m->layers.resize(cfg.n_layers);
  for (LayerWeights& L : m->layers) {
    L.attn_norm.assign(cfg.dim, 1.0f);
    L.mlp_norm.assign(cfg.dim, 1.0f);
    if (gpt) {
      L.attn_norm_bias.assign(cfg.dim, 0.0f);
      L.mlp_norm_bias.assign(cfg.dim, 0.0f);
    }
    // The slots the newer families' configs ask for, so any validated config runs (fuzz_config).
    if (cfg.qk_norm != QkNorm::None) {
      const bool per_head = cfg.qk_norm == QkNorm::PerHead;
      L.q_norm.assign(per_head ? cfg.head_dim : cfg.q_dim(), 1.0f);
      L.k_norm.assign(per_head ? cfg.head_dim : cfg.kv_dim(), 1.0f);
      if (gpt && per_head) {
        L.q_norm_bias.assign(cfg.head_dim, 0.0f);
        L.k_norm_bias.assign(cfg.head_dim, 0.0f);
      }
    }
    if (cfg.output_norms) {
      L.post_attn_norm.assign(cfg.dim, 1.0f);
      L.post_mlp_norm.assign(cfg.dim, 1.0f);
    }
    bool qkv_bias = cfg.arch == "gpt2";
    L.wq = lin(cfg.q_dim(), cfg.dim, qkv_bias);
    L.wk = lin(cfg.kv_dim(), cfg.dim, qkv_bias);
    L.wv = lin(cfg.kv_dim(), cfg.dim, qkv_bias);
    L.wo = lin(cfg.dim, cfg.q_dim(), gpt);
    if (cfg.mlp == MlpKind::SwiGLU) L.w_gate = lin(cfg.hidden_dim, cfg.dim, false);
    L.w_up = lin(cfg.hidden_dim, cfg.dim, gpt);
    L.w_down = lin(cfg.dim, cfg.hidden_dim, gpt);
  }
  m->final_norm.assign(cfg.dim, 1.0f);
  if (gpt) m->final_norm_bias.assign(cfg.dim, 0.0f);
  if (!cfg.tied_embeddings) m->lm_head = lin(cfg.vocab_size, cfg.dim, false);
  m->init_rope();
  m->fingerprint_source = "synthetic seed " + std::to_string(seed);
  return m;
}

size_t synthetic_model_bytes(const ModelConfig& c) {
  const bool gpt = c.norm == NormKind::LayerNorm;
  size_t n = static_cast<size_t>(c.vocab_size) * c.dim +
             (c.learned_positions ? static_cast<size_t>(c.max_seq_len) * c.dim : 0);
  size_t per_layer = static_cast<size_t>(c.dim) * (c.q_dim() + 2 * c.kv_dim()) +
                     static_cast<size_t>(c.q_dim()) * c.dim +
                     static_cast<size_t>(c.dim) * c.hidden_dim * (c.mlp == MlpKind::SwiGLU ? 3 : 2) + 2 * c.dim;
  if (gpt) per_layer += c.q_dim() + 2 * c.kv_dim() + c.dim + c.hidden_dim + c.dim + 2 * c.dim;
  n += per_layer * c.n_layers + c.dim * (gpt ? 2 : 1);
  if (!c.tied_embeddings) n += static_cast<size_t>(c.vocab_size) * c.dim;
  return n * sizeof(float);
}

std::vector<int> preset_prompt_ids(const ModelConfig& cfg) {
  // Encodings of "What is KV caching?" by the GPT-2 and Llama-2 tokenizers (the Llama ids start
  // with BOS), fixed here so the default bench needs no tokenizer files.
  if (cfg.vocab_size == 50257) return {2061, 318, 509, 53, 40918, 30};
  if (cfg.vocab_size == 32000) return {1, 1724, 338, 476, 29963, 22488, 29973};
  fail("no built-in prompt for a vocabulary of ", cfg.vocab_size, " tokens");
}

}  // namespace kvlm
