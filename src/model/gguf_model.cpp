#include "model/gguf_model.h"

#include <cmath>

#include "core/error.h"
#include "model/bind_weights.h"

namespace kvlm {

namespace {

int meta_int(const GgufFile& g, const std::string& key, int lo, int hi) {
  int64_t v = g.get(key).as_int(key);
  if (v < lo || v > hi) fail(g.path, ": metadata ", key, " = ", v, " is out of range [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}

// llama.cpp's names -> Hugging Face's, so one binder serves both.
std::string hf_name(const std::string& n, bool gpt2) {
  static const std::pair<const char*, const char*> llama[] = {
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}};
  static const std::pair<const char*, const char*> gpt[] = {
      {"attn_norm", "ln_1"}, {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
      {"ffn_norm", "ln_2"},  {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  if (n.rfind("blk.", 0) == 0) {
    size_t dot = n.find('.', 4);
    if (dot == std::string::npos) return n;
    std::string layer = n.substr(4, dot - 4), rest = n.substr(dot + 1);
    size_t suffix = rest.rfind('.');
    std::string base = rest.substr(0, suffix), tail = suffix == std::string::npos ? "" : rest.substr(suffix);
    const auto* table = gpt2 ? gpt : llama;
    size_t count = gpt2 ? std::size(gpt) : std::size(llama);
    for (size_t i = 0; i < count; ++i)
      if (base == table[i].first)
        return (gpt2 ? "h." : "model.layers.") + layer + "." + table[i].second + tail;
    return n;
  }
  if (gpt2) {
    if (n == "token_embd.weight") return "wte.weight";
    if (n == "position_embd.weight") return "wpe.weight";
    if (n == "output_norm.weight") return "ln_f.weight";
    if (n == "output_norm.bias") return "ln_f.bias";
    if (n == "output.weight") return "lm_head.weight";
    return n;
  }
  if (n == "token_embd.weight") return "model.embed_tokens.weight";
  if (n == "output_norm.weight") return "model.norm.weight";
  if (n == "output.weight") return "lm_head.weight";
  return n;
}

}  // namespace

namespace {

// Every "<arch>." key llama.cpp may write for the supported architectures, and what kvlm does
// with it. A key outside this list is refused by name: it may change the arithmetic.
const char* const kKnownArchKeys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
    "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
    "attention.layer_norm_epsilon", "attention.layer_norm_rms_epsilon", "attention.causal",
    "attention.sliding_window", "rope.dimension_count", "rope.freq_base", "rope.scale_linear",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.attn_factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned", "expert_count", "expert_used_count", "use_parallel_residual", "tensor_data_layout"};

void refuse_unknown_keys(const GgufFile& g, const std::string& prefix) {
  for (const auto& [key, v] : g.meta) {
    if (key.rfind(prefix, 0) != 0) continue;
    std::string rest = key.substr(prefix.size());
    bool known = false;
    for (const char* k : kKnownArchKeys) known = known || rest == k;
    if (!known) fail(g.path, ": GGUF metadata ", key, " is not supported (it may change the model's arithmetic)");
  }
}

double meta_float(const GgufFile& g, const std::string& key, double fallback) {
  if (!g.has(key)) return fallback;
  double v = g.get(key).as_float(key);
  if (!std::isfinite(v)) fail(g.path, ": metadata ", key, " = ", v, " is not a finite number");
  return v;
}

// rope.*: freq_base, linear scaling (rope.scaling.type/factor or the older rope.scale_linear) and
// the rotated width are honoured; YaRN, LongRoPE, attn_factor != 1 and partial rotation refused.
void read_rope(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.rope_theta = static_cast<float>(meta_float(g, p + "rope.freq_base", 10000.0));
  if (g.has(p + "rope.dimension_count")) {
    int n_rot = meta_int(g, p + "rope.dimension_count", 0, 1 << 20);
    if (n_rot != c.head_dim)
      fail(g.path, ": ", p, "rope.dimension_count = ", n_rot, " rotates part of each head (head_dim ", c.head_dim,
           "); partial rotary embeddings are not supported");
  }
  std::string type = g.has(p + "rope.scaling.type") ? g.get(p + "rope.scaling.type").as_string("rope.scaling.type") : "";
  double factor = meta_float(g, p + "rope.scaling.factor", 0.0);
  if (g.has(p + "rope.scale_linear")) {  // older files: a linear factor and no type
    if (!type.empty() && type != "linear") fail(g.path, ": rope.scale_linear conflicts with rope.scaling.type ", type);
    type = "linear";
    factor = meta_float(g, p + "rope.scale_linear", 1.0);
  }
  if (type == "none" || (type == "linear" && factor == 1.0)) type = "";
  if (!type.empty() && type != "linear")
    fail(g.path, ": ", p, "rope.scaling.type '", type, "' is not supported (supported: none, linear)");
  if (type == "linear") {
    if (!(factor > 0)) fail(g.path, ": ", p, "rope.scaling.factor = ", factor, " must be positive");
    c.rope_scaling = "linear";
    c.rope_factor = static_cast<float>(factor);
  }
  double attn_factor = meta_float(g, p + "rope.scaling.attn_factor", 1.0);
  if (attn_factor != 1.0)
    fail(g.path, ": ", p, "rope.scaling.attn_factor = ", attn_factor, " is not supported (only 1)");
}

}  // namespace

ModelConfig gguf_config(const GgufFile& g) {
  std::string arch = g.get("general.architecture").as_string("general.architecture");
  if (arch != "llama" && arch != "gpt2" && arch != "qwen2")
    fail(g.path, ": unsupported GGUF architecture '", arch, "' (supported: llama, qwen2, gpt2)");
  const bool gpt2 = arch == "gpt2";
  ModelConfig c;
  c.arch = arch;
  const std::string p = arch + ".";
  refuse_unknown_keys(g, p);
  c.dim = meta_int(g, p + "embedding_length", 1, 65536);
  c.n_layers = meta_int(g, p + "block_count", 1, 1024);
  c.hidden_dim = meta_int(g, p + "feed_forward_length", 1, 262144);
  c.n_heads = meta_int(g, p + "attention.head_count", 1, 1024);
  c.n_kv_heads = g.has(p + "attention.head_count_kv") ? meta_int(g, p + "attention.head_count_kv", 1, 1024) : c.n_heads;
  c.head_dim = g.has(p + "attention.key_length") ? meta_int(g, p + "attention.key_length", 1, 1024) : c.dim / c.n_heads;
  if (g.has(p + "attention.value_length") && meta_int(g, p + "attention.value_length", 1, 1024) != c.head_dim)
    fail(g.path, ": ", p, "attention.value_length differs from key_length; kvlm needs them equal");
  c.max_seq_len = meta_int(g, p + "context_length", 1, 16 * 1024 * 1024);
  if (g.has(p + "expert_count") && meta_int(g, p + "expert_count", 0, 1 << 20) != 0)
    fail(g.path, ": mixture-of-experts models (", p, "expert_count) are not supported");
  if (g.has(p + "use_parallel_residual") && g.get(p + "use_parallel_residual").as_bool("use_parallel_residual"))
    fail(g.path, ": ", p, "use_parallel_residual is not supported");
  if (g.has(p + "attention.causal") && !g.get(p + "attention.causal").as_bool("attention.causal"))
    fail(g.path, ": non-causal attention (", p, "attention.causal = false) is not supported");
  int window = g.has(p + "attention.sliding_window") ? meta_int(g, p + "attention.sliding_window", 0, 1 << 30) : 0;
  c.layer_window.assign(c.n_layers, window);
  const TensorInfo& emb = g.tensors.get("token_embd.weight");
  if (emb.shape.size() != 2) fail(g.path, ": token_embd.weight must be 2-D");
  c.vocab_size = static_cast<int>(std::min<int64_t>(emb.shape[0], INT32_MAX));
  if (g.has(p + "vocab_size") && meta_int(g, p + "vocab_size", 1, INT32_MAX) != c.vocab_size)
    fail(g.path, ": ", p, "vocab_size disagrees with token_embd.weight's ", c.vocab_size, " rows");
  c.tied_embeddings = !g.tensors.has("output.weight");
  if (g.has("tokenizer.ggml.bos_token_id")) c.bos_id = meta_int(g, "tokenizer.ggml.bos_token_id", 0, INT32_MAX);
  if (g.has("tokenizer.ggml.eos_token_id")) c.eos_id = meta_int(g, "tokenizer.ggml.eos_token_id", 0, INT32_MAX);
  if (gpt2) {
    c.norm = NormKind::LayerNorm;
    c.mlp = MlpKind::GeluTanh;
    c.learned_positions = true;
    c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_epsilon").as_float("layer_norm_epsilon"));
    for (const char* k : {"rope.freq_base", "rope.dimension_count", "rope.scaling.type", "rope.scale_linear"})
      if (g.has(p + k)) fail(g.path, ": GPT-2 has no rotary embeddings, but the file sets ", p, k);
  } else {
    c.norm = NormKind::RMSNorm;
    c.mlp = MlpKind::SwiGLU;
    // llama.cpp's llama weights are in Meta's layout (adjacent pairs); qwen2 keeps HF's.
    c.rope = arch == "llama" ? RopeKind::AdjacentPairs : RopeKind::RotateHalf;
    c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_rms_epsilon").as_float("rms_epsilon"));
    read_rope(g, p, c);
  }
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (!gpt2 && g.tensors.has("rope_freqs.weight")) {  // Llama 3 rope scaling, as llama.cpp stores it
    if (c.head_dim <= 0 || c.head_dim > 1024 || c.head_dim % 2) fail(g.path, ": head_dim ", c.head_dim, " is invalid");
    c.rope_freq_divisors = g.tensors.read_f32("rope_freqs.weight", {c.head_dim / 2});
  }
  c.validate(g.path);
  return c;
}

std::unique_ptr<Model> load_gguf_model(const GgufFile& g) {
  auto m = std::make_unique<Model>();
  m->cfg = gguf_config(g);
  const bool gpt2 = m->cfg.arch == "gpt2";
  // Run the matrices in the file's type: Q8_0 / Q4_0 re-encode exactly (same scales, same quants).
  for (const char* probe : {"blk.0.attn_q.weight", "blk.0.attn_qkv.weight"})
    if (g.tensors.has(probe)) {
      DType t = g.tensors.get(probe).dtype;
      // Q4_K / Q6_K run dequantized to f32; F16 stays F16 and BF16 stays BF16.
      m->stored_format = t == DType::Q8_0 ? WeightFormat::Q8_0 : t == DType::Q4_0 ? WeightFormat::Q4_0
                         : t == DType::F16 ? WeightFormat::F16 : t == DType::BF16 ? WeightFormat::BF16
                                                               : WeightFormat::F32;
    }
  TensorSource renamed;
  for (const auto& [name, t] : g.tensors.all()) {
    TensorInfo copy = t;
    copy.name = hf_name(name, gpt2);
    renamed.add(std::move(copy));
  }
  if (gpt2)
    bind_gpt2(renamed, *m, /*conv1d_layout=*/false);
  else
    bind_llama(renamed, *m);
  if (renamed.has("rope_freqs.weight")) renamed.get("rope_freqs.weight");  // read by gguf_config
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
