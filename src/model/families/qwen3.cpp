// Qwen3 (Qwen3ForCausalLM): Qwen2's layer without the q/k/v biases (attention_bias, default off),
// with a per-head RMSNorm of queries and keys between their projections and RoPE (q_norm,
// k_norm), an explicit head_dim, and Qwen2's window rules. GGUF keeps rotate-half RoPE.
// Qwen3-MoE (Qwen3MoeForCausalLM): the same attention, with a mixture of SwiGLU experts as the MLP
// of every decoder_sparse_step-th layer not in mlp_only_layers; one window for every layer.
#include <algorithm>

#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig qwen3_from_hf(const HfReader& r) {
  ModelConfig c = qwen2_like_from_hf(r, "qwen3");
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = 0;
  c.qk_norm = QkNorm::PerHead;
  return c;
}

void qwen3_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
  c.qk_norm = QkNorm::PerHead;
}

ModelConfig qwen3_moe_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "qwen3_moe");
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", false);
  c.mlp_bias = 0;
  c.qk_norm = QkNorm::PerHead;
  if (r.boolean_or("use_sliding_window", false))
    std::fill(c.layer_window.begin(), c.layer_window.end(), r.integer_or("sliding_window", 4096));
  // Checkpoints say num_experts; transformers >= 5 saves its alias num_local_experts.
  const int experts = r.has("num_experts") ? r.integer("num_experts") : r.integer("num_local_experts");
  if (r.has("num_experts") && r.has("num_local_experts") && r.integer("num_local_experts") != experts)
    fail(r.label, ": num_experts and num_local_experts disagree; keep one");
  read_hf_experts(r, c, experts, r.integer("moe_intermediate_size"));
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
  const int step = r.integer_or("decoder_sparse_step", 1);
  if (step < 1) fail(r.label, ": decoder_sparse_step must be at least 1");
  for (int l = 0; l < c.n_layers; ++l) c.layer_moe[l] = (l + 1) % step == 0;
  if (r.has("mlp_only_layers")) {
    const nlohmann::json& dense = r.j["mlp_only_layers"];
    if (!dense.is_array()) fail(r.label, ": mlp_only_layers must be a list of layer indices");
    for (const nlohmann::json& l : dense) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.n_layers)
        fail(r.label, ": mlp_only_layers holds ", l.dump(), ", not a layer index below ", c.n_layers);
      c.layer_moe[l.get<int>()] = 0;
    }
  }
  for (const char* key : {"router_aux_loss_coef", "output_router_logits"}) r.has(key);  // training only
  return c;
}

void qwen3_moe_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  qwen3_from_gguf(g, p, c);
  read_gguf_experts(g, p, c);
}

const ExpertNames kQwen3MoeExperts = {"mlp.gate", "mlp.experts.", "gate_proj", "up_proj", "down_proj"};

void bind_qwen3(const TensorSource& s, Model& m, TensorLayout) {
  bind_llama_layers(s, m, kQwen3MoeExperts);
  const ModelConfig& c = m.cfg;
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    m.layers[i].q_norm = s.read_f32(p + "q_norm.weight", {c.head_dim});
    m.layers[i].k_norm = s.read_f32(p + "k_norm.weight", {c.head_dim});
  }
}

void forward_qwen3(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::qkv(s, L, xn, q, k, v);
    // Every head of every row is one RMSNorm row of head_dim values, in place.
    s.ops.rms_norm(q, L.q_norm.data(), q, n * c.n_heads, c.head_dim, c.norm_eps);
    s.ops.rms_norm(k, L.k_norm.data(), k, n * c.n_kv_heads, c.head_dim, c.norm_eps);
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

const GgufNames kQwen3GgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_q_norm", "self_attn.q_norm"},
     {"attn_k_norm", "self_attn.k_norm"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"},
     {"ffn_gate_inp", "mlp.gate"},
     {"ffn_gate_exps", "mlp.experts.{e}.gate_proj"},
     {"ffn_up_exps", "mlp.experts.{e}.up_proj"},
     {"ffn_down_exps", "mlp.experts.{e}.down_proj"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

}  // namespace

extern const Family kQwen3Family = {"qwen3",         "qwen3",          "Qwen3ForCausalLM", "qwen3",      qwen3_from_hf,
                                    qwen3_from_gguf, &kQwen3GgufNames, bind_qwen3,         forward_qwen3};
extern const Family kQwen3MoeFamily = {"qwen3_moe",      "qwen3_moe",       "Qwen3MoeForCausalLM",
                                       "qwen3moe",       qwen3_moe_from_hf, qwen3_moe_from_gguf,
                                       &kQwen3GgufNames, bind_qwen3,        forward_qwen3};

}  // namespace kvlm
