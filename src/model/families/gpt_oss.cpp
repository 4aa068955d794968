// gpt-oss (GptOssForCausalLM): a Llama-like layer with q/k/v/o biases, a learned sink logit per
// head in every attention softmax, sliding and full layers alternating (layer_types), YaRN RoPE,
// and a mixture of experts in every layer: a router with a bias, top-k of its logits softmaxed,
// and experts with biases whose gate is clamped (swiglu_limit) and weighed by sigmoid(alpha * g).
// The checkpoint stacks the experts as x @ W ([experts][in][out]), gate and up interleaved by
// column; they are split into [out][in] matrices at load. Its MXFP4-packed checkpoints
// (*_blocks, *_scales) are refused by name. GGUF ("gpt-oss", as llama.cpp's converter writes it)
// holds the experts split and transposed already, and takes llama.cpp's gate constants.
#include <algorithm>

#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

ModelConfig gpt_oss_from_hf(const HfReader& r) {
  ModelConfig c = llama_like_from_hf(r, "gpt_oss", /*partial_rotary=*/false, /*yarn=*/true);
  c.qkv_bias = c.o_bias = r.boolean_or("attention_bias", true);
  c.mlp_bias = 0;
  apply_layer_types(r, c, r.integer_or("sliding_window", 0));
  read_hf_experts(r, c, r.integer("num_local_experts"), c.hidden_dim);
  c.norm_topk_prob = true;  // softmax over the chosen logits: the same as renormalizing the full softmax's
  c.swiglu_limit = r.number_or("swiglu_limit", 7.0f);
  c.swiglu_alpha = r.number_or("swiglu_alpha", 1.702f);
  if (!(c.swiglu_limit > 0)) fail(r.label, ": swiglu_limit must be positive");
  c.attn_sinks = true;
  for (const char* key : {"router_aux_loss_coef", "output_router_logits"}) r.has(key);  // training only
  return c;
}

// Expert e's matrices from the stacked x @ W tensors: gate and up from gate_up [E][dim][2I]
// (columns 2i and 2i + 1), down from down [E][I][dim]; each transposed to [out][in], in the
// stack's type where it is a half type (exact: the values came from it).
void bind_expert_stacks(const TensorSource& s, const std::string& p, const ModelConfig& c, LayerWeights& L) {
  if (s.has(p + "gate_up_proj_blocks"))
    fail(s.get(p + "gate_up_proj_blocks").file, ": MXFP4-packed experts (", p,
         "gate_up_proj_blocks) are not supported in safetensors; dequantize them to bf16 first, or convert the model "
         "to GGUF");
  const int E = c.n_experts, I = c.expert_hidden_dim, D = c.dim;
  const Buffer<float> gate_up = s.read_f32(p + "gate_up_proj", {E, D, 2 * I});
  const Buffer<float> gate_up_bias = s.read_f32(p + "gate_up_proj_bias", {E, 2 * I});
  const Buffer<float> down = s.read_f32(p + "down_proj", {E, I, D});
  const Buffer<float> down_bias = s.read_f32(p + "down_proj_bias", {E, D});
  const DType stored = s.get(p + "gate_up_proj").dtype;
  auto matrix = [](int out, int in) {
    Linear l;
    l.out = out;
    l.in = in;
    l.w = Buffer<float>(static_cast<size_t>(out) * in);
    l.b = Buffer<float>(static_cast<size_t>(out));
    return l;
  };
  L.experts.resize(E);
  for (int e = 0; e < E; ++e) {
    Expert& x = L.experts[e];
    x.gate = matrix(I, D);
    x.up = matrix(I, D);
    x.down = matrix(D, I);
    const float* gu = gate_up.data() + static_cast<size_t>(e) * D * 2 * I;
    for (int i = 0; i < I; ++i) {
      for (int d = 0; d < D; ++d) {
        x.gate.w[static_cast<size_t>(i) * D + d] = gu[static_cast<size_t>(d) * 2 * I + 2 * i];
        x.up.w[static_cast<size_t>(i) * D + d] = gu[static_cast<size_t>(d) * 2 * I + 2 * i + 1];
      }
      x.gate.b[i] = gate_up_bias[static_cast<size_t>(e) * 2 * I + 2 * i];
      x.up.b[i] = gate_up_bias[static_cast<size_t>(e) * 2 * I + 2 * i + 1];
    }
    const float* dn = down.data() + static_cast<size_t>(e) * I * D;
    for (int d = 0; d < D; ++d)
      for (int i = 0; i < I; ++i) x.down.w[static_cast<size_t>(d) * I + i] = dn[static_cast<size_t>(i) * D + d];
    std::copy_n(down_bias.data() + static_cast<size_t>(e) * D, D, x.down.b.data());
    if (stored == DType::BF16 || stored == DType::F16)
      for (Linear* l : {&x.gate, &x.up, &x.down}) l->convert(stored);
  }
}

void gpt_oss_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c, /*yarn=*/true);
  c.rope = RopeKind::RotateHalf;
  c.qkv_bias = c.o_bias = g.tensors.has("blk.0.attn_q.bias") ? 1 : 0;
  c.mlp_bias = 0;
  read_gguf_experts(g, p, c);
  if (c.layer_moe.empty()) fail(g.path, ": a gpt-oss file needs ", p, "expert_count");
  c.norm_topk_prob = true;
  // llama.cpp's gpt-oss gate constants (its files carry no keys for them).
  c.swiglu_limit = 7.0f;
  c.swiglu_alpha = 1.702f;
  c.attn_sinks = true;
  // Sliding layers: the even ones, as llama.cpp's default pattern of 2 says, unless the file lists them.
  const int window = c.layer_window.empty() ? 0 : c.layer_window[0];
  for (int l = 0; l < c.n_layers; ++l) c.layer_window[l] = l % 2 == 0 ? window : 0;
  read_gguf_window_pattern(g, p, c, window);
}

const GgufNames kGptOssGgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_k", "self_attn.k_proj"},
     {"attn_v", "self_attn.v_proj"},
     {"attn_output", "self_attn.o_proj"},
     {"attn_sinks", "self_attn.sinks"},
     {"post_attention_norm", "post_attention_layernorm"},
     {"ffn_gate_inp", "mlp.router"},
     {"ffn_gate_exps", "mlp.experts.{e}.gate"},
     {"ffn_up_exps", "mlp.experts.{e}.up"},
     {"ffn_down_exps", "mlp.experts.{e}.down"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

void bind_gpt_oss(const TensorSource& s, Model& m, TensorLayout layout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  const bool qkv_bias = c.qkv_bias == 1, o_bias = c.o_bias == 1;
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    L.wq = bind_linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, qkv_bias);
    L.wk = bind_linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wv = bind_linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wo = bind_linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), o_bias);
    L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    if (layout == TensorLayout::Gguf) {  // llama.cpp's converter splits and transposes the stacks
      L.attn_sinks = s.read_f32(p + "self_attn.sinks.weight", {c.n_heads});
      bind_experts(s, p, ExpertNames{"mlp.router", "mlp.experts.", "gate", "up", "down"}, c, L);
      continue;
    }
    L.attn_sinks = s.read_f32(p + "self_attn.sinks", {c.n_heads});
    L.router = bind_linear(s, p + "mlp.router", c.n_experts, c.dim, true);
    bind_expert_stacks(s, p + "mlp.experts.", c, L);
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

void forward_gpt_oss(ForwardStep& s, const Model& m) {
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
    AttentionParams p = blocks::attention_params(c, l);
    p.sinks = L.attn_sinks.data();
    s.attention(p, q, k, v, att);
    s.ops.linear(L.wo, att, n, tmp);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::moe_mlp(s, c, L, xn, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

}  // namespace

extern const Family kGptOssFamily = {"gpt_oss",         "gpt_oss",       "GptOssForCausalLM",
                                     "gpt-oss",         gpt_oss_from_hf, gpt_oss_from_gguf,
                                     &kGptOssGgufNames, bind_gpt_oss,    forward_gpt_oss};

}  // namespace kvlm
