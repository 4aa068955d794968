#include "model/gguf_model.h"

#include <cmath>

#include "core/error.h"
#include "model/family.h"

namespace kvlm {

int gguf_int(const GgufFile& g, const std::string& key, int lo, int hi) {
  int64_t v = g.get(key).as_int(key);
  if (v < lo || v > hi) fail(g.path, ": metadata ", key, " = ", v, " is out of range [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}

double gguf_float(const GgufFile& g, const std::string& key, double fallback) {
  if (!g.has(key)) return fallback;
  double v = g.get(key).as_float(key);
  if (!std::isfinite(v)) fail(g.path, ": metadata ", key, " = ", v, " is not a finite number");
  return v;
}

void read_gguf_experts(const GgufFile& g, const std::string& p, ModelConfig& c) {
  if (!g.has(p + "expert_count") || gguf_int(g, p + "expert_count", 0, 4096) == 0) return;
  c.n_experts = gguf_int(g, p + "expert_count", 1, 4096);
  c.experts_per_token = gguf_int(g, p + "expert_used_count", 1, c.n_experts);
  c.expert_hidden_dim =
      g.has(p + "expert_feed_forward_length") ? gguf_int(g, p + "expert_feed_forward_length", 1, 262144) : c.hidden_dim;
  c.norm_topk_prob =
      !g.has(p + "expert_weights_norm") || g.get(p + "expert_weights_norm").as_bool("expert_weights_norm");
  c.layer_moe.assign(c.n_layers, 0);
  for (int l = 0; l < c.n_layers; ++l)
    c.layer_moe[l] = g.tensors.has("blk." + std::to_string(l) + ".ffn_gate_inp.weight");
}

namespace {

// llama.cpp's tensor name -> the family's Hugging Face name, so one binder serves both formats.
std::string hf_name(const std::string& n, const GgufNames& names) {
  auto split = [](const std::string& s) {
    size_t dot = s.rfind('.');
    return dot == std::string::npos ? std::pair{s, std::string()} : std::pair{s.substr(0, dot), s.substr(dot)};
  };
  if (n.rfind("blk.", 0) == 0) {
    size_t dot = n.find('.', 4);
    if (dot == std::string::npos) return n;
    auto [base, tail] = split(n.substr(dot + 1));
    for (const auto& [gguf, hf] : names.block)
      if (base == gguf) return names.block_prefix + n.substr(4, dot - 4) + "." + hf + tail;
    return n;
  }
  auto [base, tail] = split(n);
  for (const auto& [gguf, hf] : names.top)
    if (base == gguf) return hf + tail;
  return n;
}

// Adds t as `name`; a stack of experts' tensors (a name with "{e}": [experts][rows][cols]
// matrices or [experts][n] biases) as one view per expert, each named with its index: the
// experts bind as any matrix or bias.
void add_renamed(TensorSource& out, const TensorInfo& t, const std::string& name) {
  const size_t at = name.find("{e}");
  if (at == std::string::npos) {
    TensorInfo copy = t;
    copy.name = name;
    out.add(std::move(copy));
    return;
  }
  const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (t.shape.size() != (bias ? 2u : 3u) || t.shape[0] <= 0 || t.nbytes % t.shape[0] != 0)
    fail(t.file, ": ", t.name, " must be a ", bias ? "2" : "3", "-D stack of expert ", bias ? "biases" : "matrices",
         ", not ", shape_str(t.shape));
  const size_t each = t.nbytes / t.shape[0];
  for (int64_t e = 0; e < t.shape[0]; ++e) {
    TensorInfo view = t;
    view.name = name.substr(0, at) + std::to_string(e) + name.substr(at + 3);
    view.shape.erase(view.shape.begin());
    view.data = t.data + e * each;
    view.nbytes = each;
    out.add(std::move(view));
  }
}

// The "<arch>." keys llama.cpp writes for every supported architecture, read here or harmless.
// Any other key is refused by name unless the family's reader read it (GgufFile notes reads):
// it may change the arithmetic.
const char* const kKnownArchKeys[] = {"context_length",
                                      "embedding_length",
                                      "block_count",
                                      "feed_forward_length",
                                      "vocab_size",
                                      "attention.head_count",
                                      "attention.head_count_kv",
                                      "attention.key_length",
                                      "attention.value_length",
                                      "attention.layer_norm_epsilon",
                                      "attention.layer_norm_rms_epsilon",
                                      "attention.causal",
                                      "attention.sliding_window",
                                      "rope.dimension_count",
                                      "rope.freq_base",
                                      "rope.scale_linear",
                                      "rope.scaling.type",
                                      "rope.scaling.factor",
                                      "rope.scaling.attn_factor",
                                      "rope.scaling.original_context_length",
                                      "rope.scaling.finetuned",
                                      "use_parallel_residual",
                                      "tensor_data_layout"};

void refuse_unknown_keys(const GgufFile& g, const std::string& prefix) {
  for (const auto& [key, v] : g.meta) {
    if (key.rfind(prefix, 0) != 0) continue;
    std::string rest = key.substr(prefix.size());
    bool known = false;
    for (const char* k : kKnownArchKeys) known = known || rest == k;
    known = known || g.read_keys.count(key);
    // A dense file may say it has no experts.
    known = known || ((rest == "expert_count" || rest == "expert_used_count") && v.as_int(key) == 0);
    if (!known) fail(g.path, ": GGUF metadata ", key, " is not supported (it may change the model's arithmetic)");
  }
}

const Family& gguf_family(const GgufFile& g) {
  return family_for_gguf_arch(g.get("general.architecture").as_string("general.architecture"), g.path);
}

}  // namespace

// The keys every family shares are read here; the family reads its own (norm, MLP, RoPE).
ModelConfig gguf_config(const GgufFile& g) {
  const Family& family = gguf_family(g);
  ModelConfig c;
  c.arch = family.name;
  const std::string p = std::string(family.gguf_arch) + ".";
  c.dim = gguf_int(g, p + "embedding_length", 1, 65536);
  c.n_layers = gguf_int(g, p + "block_count", 1, 1024);
  c.hidden_dim = gguf_int(g, p + "feed_forward_length", 1, 262144);
  c.n_heads = gguf_int(g, p + "attention.head_count", 1, 1024);
  c.n_kv_heads = g.has(p + "attention.head_count_kv") ? gguf_int(g, p + "attention.head_count_kv", 1, 1024) : c.n_heads;
  c.head_dim = g.has(p + "attention.key_length") ? gguf_int(g, p + "attention.key_length", 1, 1024) : c.dim / c.n_heads;
  // Latent attention's cached row is wider than the value part it feeds (the family checks both).
  if (g.has(p + "attention.value_length") && !g.has(p + "attention.kv_lora_rank") &&
      gguf_int(g, p + "attention.value_length", 1, 1024) != c.head_dim)
    fail(g.path, ": ", p, "attention.value_length differs from key_length; kvlm needs them equal");
  c.max_seq_len = gguf_int(g, p + "context_length", 1, 16 * 1024 * 1024);
  if (g.has(p + "attention.causal") && !g.get(p + "attention.causal").as_bool("attention.causal"))
    fail(g.path, ": non-causal attention (", p, "attention.causal = false) is not supported");
  int window = g.has(p + "attention.sliding_window") ? gguf_int(g, p + "attention.sliding_window", 0, 1 << 30) : 0;
  c.layer_window.assign(c.n_layers, window);
  const TensorInfo& emb = g.tensors.get("token_embd.weight");
  if (emb.shape.size() != 2) fail(g.path, ": token_embd.weight must be 2-D");
  c.vocab_size = static_cast<int>(std::min<int64_t>(emb.shape[0], INT32_MAX));
  if (g.has(p + "vocab_size") && gguf_int(g, p + "vocab_size", 1, INT32_MAX) != c.vocab_size)
    fail(g.path, ": ", p, "vocab_size disagrees with token_embd.weight's ", c.vocab_size, " rows");
  c.tied_embeddings = !g.tensors.has("output.weight");
  if (g.has("tokenizer.ggml.bos_token_id")) c.bos_id = gguf_int(g, "tokenizer.ggml.bos_token_id", 0, INT32_MAX);
  if (g.has("tokenizer.ggml.eos_token_id")) c.eos_id = gguf_int(g, "tokenizer.ggml.eos_token_id", 0, INT32_MAX);
  family.from_gguf(g, p, c);
  refuse_unknown_keys(g, p);
  if (!c.parallel_residual && g.has(p + "use_parallel_residual") &&
      g.get(p + "use_parallel_residual").as_bool("use_parallel_residual"))
    fail(g.path, ": ", p, "use_parallel_residual is not supported for ", family.name);
  if (c.attn_scale == 0.0f) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.validate(g.path);
  return c;
}

DType gguf_matrix_type(const GgufFile& g) {
  for (const char* probe : {"blk.0.attn_q.weight", "blk.0.attn_qkv.weight"})
    if (auto it = g.tensors.all().find(probe); it != g.tensors.all().end()) return it->second.dtype;
  return DType::F32;
}

std::unique_ptr<Model> load_gguf_model(const GgufFile& g) {
  const Family& family = gguf_family(g);
  auto m = std::make_unique<Model>();
  m->cfg = gguf_config(g);
  // Run the matrices in the file's type: Q8_0 / Q4_0 re-encode exactly (same scales, same quants).
  // A type Linear runs keeps its type (f16 stays f16, Q4_K stays Q4_K).
  m->source_format = gguf_matrix_type(g);
  m->stored_format = runs_as_stored(m->source_format) ? m->source_format : DType::F32;
  TensorSource renamed;
  renamed.share_files(g.tensors);
  for (const auto& [name, t] : g.tensors.all()) add_renamed(renamed, t, hf_name(name, *family.gguf_names));
  family.bind(renamed, *m, TensorLayout::Gguf);
  if (renamed.has("rope_freqs.weight")) renamed.get("rope_freqs.weight");  // read by the family's config
  // As llama.cpp does: a tensor no layer uses (block_count below the file's blocks, a stray
  // name) means the metadata and the tensors disagree.
  std::vector<std::string> extra = renamed.unused();
  if (!extra.empty())
    fail(g.path, ": ", extra.size(), " tensor(s) are not used by a ", m->cfg.arch, " model with ", m->cfg.n_layers,
         " blocks (first: ", extra.front(), "); the metadata and the tensors disagree");
  m->init_rope();
  return m;
}

}  // namespace kvlm
