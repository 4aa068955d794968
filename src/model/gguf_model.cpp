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

ModelConfig gguf_config(const GgufFile& g) {
  std::string arch = g.get("general.architecture").as_string("general.architecture");
  if (arch != "llama" && arch != "gpt2" && arch != "qwen2")
    fail(g.path, ": unsupported GGUF architecture '", arch, "' (supported: llama, qwen2, gpt2)");
  const bool gpt2 = arch == "gpt2";
  ModelConfig c;
  c.arch = arch;
  const std::string p = arch + ".";
  c.dim = meta_int(g, p + "embedding_length", 1, 65536);
  c.n_layers = meta_int(g, p + "block_count", 1, 1024);
  c.hidden_dim = meta_int(g, p + "feed_forward_length", 1, 262144);
  c.n_heads = meta_int(g, p + "attention.head_count", 1, 1024);
  c.n_kv_heads = g.has(p + "attention.head_count_kv") ? meta_int(g, p + "attention.head_count_kv", 1, 1024) : c.n_heads;
  c.head_dim = g.has(p + "attention.key_length") ? meta_int(g, p + "attention.key_length", 1, 1024) : c.dim / c.n_heads;
  c.max_seq_len = meta_int(g, p + "context_length", 1, 16 * 1024 * 1024);
  c.layer_window.assign(c.n_layers, 0);
  const TensorInfo& emb = g.tensors.get("token_embd.weight");
  if (emb.shape.size() != 2) fail(g.path, ": token_embd.weight must be 2-D");
  c.vocab_size = static_cast<int>(std::min<int64_t>(emb.shape[0], INT32_MAX));
  c.tied_embeddings = !g.tensors.has("output.weight");
  if (g.has("tokenizer.ggml.bos_token_id")) c.bos_id = meta_int(g, "tokenizer.ggml.bos_token_id", 0, INT32_MAX);
  if (g.has("tokenizer.ggml.eos_token_id")) c.eos_id = meta_int(g, "tokenizer.ggml.eos_token_id", 0, INT32_MAX);
  if (gpt2) {
    c.norm = NormKind::LayerNorm;
    c.mlp = MlpKind::GeluTanh;
    c.learned_positions = true;
    c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_epsilon").as_float("layer_norm_epsilon"));
  } else {
    c.norm = NormKind::RMSNorm;
    c.mlp = MlpKind::SwiGLU;
    // llama.cpp's llama weights are in Meta's layout (adjacent pairs); qwen2 keeps HF's.
    c.rope = arch == "llama" ? RopeKind::AdjacentPairs : RopeKind::RotateHalf;
    c.norm_eps = static_cast<float>(g.get(p + "attention.layer_norm_rms_epsilon").as_float("rms_epsilon"));
    if (g.has(p + "rope.freq_base")) c.rope_theta = static_cast<float>(g.get(p + "rope.freq_base").as_float("freq_base"));
  }
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.validate(g.path);
  if (g.tensors.has("rope_freqs.weight"))  // Llama 3 rope scaling, as llama.cpp stores it
    c.rope_freq_divisors = g.tensors.read_f32("rope_freqs.weight", {c.head_dim / 2});
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
      m->stored_format = t == DType::Q8_0 ? WeightFormat::Q8_0 : t == DType::Q4_0 ? WeightFormat::Q4_0
                         : t == DType::F32 ? WeightFormat::F32 : t == DType::Q4_K || t == DType::Q6_K ? WeightFormat::F32
                                                                : WeightFormat::BF16;
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
  m->init_rope();
  return m;
}

}  // namespace kvlm
