// DeepSeek-V2 and V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM): multi-head latent attention
// (MLA) and a mixture of experts; they differ in routing alone.
//
// Attention caches, per position and layer, one row: the kv_lora_rank latent (kv_a_proj's first
// part, RMS-normed) and the qk_rope_head_dim rotated key shared by all heads. Every head reads
// that row as its key and its value (one KV head). A head's query is absorbed into the latent:
// its no-RoPE part through the key half of kv_b_proj, transposed (q_nope W_UK), its RoPE part as
// is; so scores equal q_nope . k_nope + q_pe . k_pe with k_nope = W_UK c, as transformers
// computes them from expanded keys. The head's output, the weighed sum of latent rows, leaves
// through the value half (W_UV), as v = W_UV c would give. The cache holds kv_lora_rank +
// qk_rope_head_dim values per position once (its values are its keys: kv_pages.h), where
// expanded attention would hold heads x (key + value head widths).
//
// The MLP: the first first_k_dense_replace layers dense, then MoE with a shared expert, routed by
// V3's sigmoid scores over groups or V2's softmax scores (greedy or over groups). RoPE rotates adjacent pairs
// (rope_interleave) or halves; YaRN scales the rotated part's scores by its attention factor squared, and every score
// by mscale(factor, mscale_all_dim) squared, as transformers does.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "model/blocks.h"
#include "model/families/llama.h"
#include "model/gguf_model.h"

namespace kvlm {

namespace {

double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

// The keys V2 and V3 share: latent attention, the RoPE and score scales, shared experts and the
// dense first layers. The family sets the routing.
ModelConfig deepseek_from_hf(const HfReader& r, const char* arch) {
  ModelConfig c = llama_like_from_hf(r, arch, /*partial_rotary=*/false, /*yarn=*/true);
  c.qkv_bias = c.o_bias = c.mlp_bias = 0;
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (r.boolean_or(key, false)) fail(r.label, ": ", key, " = true is not supported for ", arch);
  c.kv_lora_rank = r.integer("kv_lora_rank");
  c.q_lora_rank = r.has("q_lora_rank") ? r.integer("q_lora_rank") : 0;
  c.qk_nope_dim = r.integer("qk_nope_head_dim");
  c.qk_rope_dim = r.integer("qk_rope_head_dim");
  c.v_head_dim = r.integer("v_head_dim");
  if (c.kv_lora_rank <= 0 || c.q_lora_rank < 0 || c.qk_nope_dim <= 0 || c.qk_rope_dim <= 0 || c.v_head_dim <= 0)
    fail(r.label, ": kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be positive");
  r.has("head_dim");             // transformers' alias of qk_rope_head_dim, which is read
  r.has("num_key_value_heads");  // expanded attention's head count; the latent row is one KV head
  c.n_kv_heads = 1;
  c.head_dim = c.kv_lora_rank + c.qk_rope_dim;
  c.rope_dims = c.qk_rope_dim;
  // V2 rotates adjacent pairs (as complex numbers); V3 too unless rope_interleave is false.
  c.rope = r.boolean_or("rope_interleave", true) ? RopeKind::AdjacentPairs : RopeKind::RotateHalf;
  // Score scales: 1/sqrt(the unabsorbed head width), YaRN's mscale_all_dim on every score, its
  // attention factor (on rotated q and k in transformers) on the rotated part's.
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_dim + c.qk_rope_dim));
  if (c.rope_scaling == "yarn") {
    const nlohmann::json& rp = r.has("rope_parameters") ? r.j["rope_parameters"] : r.j["rope_scaling"];
    const double all_dim = rp.value("mscale_all_dim", 0.0);
    if (all_dim != 0) scale *= std::pow(yarn_mscale(c.rope_factor, all_dim), 2);
    c.mla_pe_scale = c.rope_attn_factor * c.rope_attn_factor;
    c.rope_attn_factor = 1.0f;
  } else if (!c.rope_scaling.empty()) {
    fail(r.label, ": rope scaling '", c.rope_scaling, "' is not supported for ", arch, " (supported: yarn)");
  }
  c.attn_scale = static_cast<float>(scale);
  if (r.integer_or("moe_layer_freq", 1) != 1) fail(r.label, ": moe_layer_freq other than 1 is not supported");
  read_hf_experts(r, c, r.integer("n_routed_experts"), r.integer("moe_intermediate_size"));
  c.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0f);
  c.shared_hidden_dim = c.expert_hidden_dim * r.integer_or("n_shared_experts", 0);
  const int dense = r.integer_or("first_k_dense_replace", 0);
  if (dense < 0) fail(r.label, ": first_k_dense_replace must be >= 0");
  for (int l = 0; l < c.n_layers; ++l) c.layer_moe[l] = l >= dense;
  // Multi-token prediction layers serve training and speculative decoding, not this forward.
  for (const char* key : {"num_nextn_predict_layers", "router_aux_loss_coef", "output_router_logits", "qk_head_dim"})
    r.has(key);
  return c;
}

void check_string(const HfReader& r, const char* key, std::initializer_list<const char*> supported, const char* arch) {
  if (!r.has(key)) return;
  const std::string v = r.string_or(key, "");
  std::string list;
  for (const char* s : supported) {
    if (v == s) return;
    list += (list.empty() ? "" : ", ") + std::string(s);
  }
  fail(r.label, ": ", key, " '", v, "' is not supported for ", arch, " (supported: ", list, ")");
}

// V3: sigmoid scores, the choice bias, groups ranked by their best two, renormalized by default.
ModelConfig deepseek_v3_from_hf(const HfReader& r) {
  ModelConfig c = deepseek_from_hf(r, "deepseek_v3");
  check_string(r, "scoring_func", {"sigmoid"}, "deepseek_v3");
  check_string(r, "topk_method", {"noaux_tc"}, "deepseek_v3");
  c.route_sigmoid = true;
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  c.n_group = r.integer_or("n_group", 1);
  c.topk_group = r.integer_or("topk_group", 1);
  return c;
}

// V2: softmax scores, greedy or within the topk_group groups holding the best single scores
// (group_limited_greedy), never renormalized (transformers does not, whatever norm_topk_prob says,
// so a true there is refused rather than guessed at).
ModelConfig deepseek_v2_from_hf(const HfReader& r) {
  ModelConfig c = deepseek_from_hf(r, "deepseek_v2");
  check_string(r, "scoring_func", {"softmax"}, "deepseek_v2");
  check_string(r, "topk_method", {"greedy", "group_limited_greedy"}, "deepseek_v2");
  if (r.boolean_or("norm_topk_prob", false)) fail(r.label, ": norm_topk_prob = true is not supported for deepseek_v2");
  c.norm_topk_prob = false;
  c.group_top = 1;
  if (r.string_or("topk_method", "greedy") == "group_limited_greedy") {
    c.n_group = r.integer("n_group");
    c.topk_group = r.integer("topk_group");
  } else {
    r.has("n_group"), r.has("topk_group");  // unused by greedy routing
  }
  return c;
}

// GGUF ("deepseek2", as llama.cpp's converter writes V2 and V3): read as llama.cpp reads it. The
// routing from expert_gating_func (absent: softmax, as llama.cpp assumes for older V2 files),
// groups ranked by their best two and weights renormalized only where expert_weights_norm says
// so, as llama.cpp does for both versions; YaRN's score factor from yarn_log_multiplier
// (0.1 x mscale_all_dim), with mscale taken equal to it, as llama.cpp does.
void deepseek_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.qkv_bias = c.o_bias = c.mlp_bias = 0;
  c.kv_lora_rank = gguf_int(g, p + "attention.kv_lora_rank", 1, 65536);
  c.q_lora_rank = g.has(p + "attention.q_lora_rank") ? gguf_int(g, p + "attention.q_lora_rank", 1, 65536) : 0;
  c.qk_rope_dim = gguf_int(g, p + "rope.dimension_count", 2, 1024);
  const int qk = gguf_int(g, p + "attention.key_length_mla", c.qk_rope_dim + 1, 2048);
  c.qk_nope_dim = qk - c.qk_rope_dim;
  c.v_head_dim = gguf_int(g, p + "attention.value_length_mla", 1, 1024);
  if (c.head_dim != c.kv_lora_rank + c.qk_rope_dim || c.n_kv_heads != 1 ||
      gguf_int(g, p + "attention.value_length", 1, 65536) != c.kv_lora_rank)
    fail(g.path, ": ", p, "attention.key_length, value_length and head_count_kv must describe one latent row of ", p,
         "attention.kv_lora_rank + rope.dimension_count");
  llama_like_from_gguf(g, p, c, /*yarn=*/true);  // rope.dimension_count: the rotated tail of the row
  c.rope = RopeKind::AdjacentPairs;
  double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  if (c.rope_scaling == "yarn") {
    if (!g.has(p + "rope.scaling.yarn_log_multiplier"))
      fail(g.path, ": YaRN without ", p, "rope.scaling.yarn_log_multiplier is not supported for deepseek2");
    const double all_dim = gguf_float(g, p + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1;
    scale *= std::pow(yarn_mscale(c.rope_factor, all_dim), 2);
    if (gguf_float(g, p + "rope.scaling.attn_factor", 1.0) != 1.0)
      fail(g.path, ": ", p, "rope.scaling.attn_factor is not supported for deepseek2");
    c.rope_attn_factor = 1.0f;
  }
  c.attn_scale = static_cast<float>(scale);
  read_gguf_experts(g, p, c);
  if (c.layer_moe.empty()) fail(g.path, ": a deepseek2 file without ", p, "expert_count is not supported");
  const int gating = g.has(p + "expert_gating_func") ? gguf_int(g, p + "expert_gating_func", 0, 16) : 1;
  if (gating != 1 && gating != 2)
    fail(g.path, ": ", p, "expert_gating_func = ", gating, " is not supported (supported: 1 softmax, 2 sigmoid)");
  c.route_sigmoid = gating == 2;
  c.norm_topk_prob =
      g.has(p + "expert_weights_norm") && g.get(p + "expert_weights_norm").as_bool("expert_weights_norm");
  c.routed_scaling_factor = static_cast<float>(gguf_float(g, p + "expert_weights_scale", 1.0));
  c.n_group = g.has(p + "expert_group_count") ? gguf_int(g, p + "expert_group_count", 1, 4096) : 1;
  c.topk_group = g.has(p + "expert_group_used_count") ? gguf_int(g, p + "expert_group_used_count", 1, 4096) : 1;
  c.group_top = 2;
  c.shared_hidden_dim = c.expert_hidden_dim * gguf_int(g, p + "expert_shared_count", 0, 64);
  const int dense = g.has(p + "leading_dense_block_count") ? gguf_int(g, p + "leading_dense_block_count", 0, 1024) : 0;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.layer_moe[l] != (l >= dense))
      fail(g.path, ": layer ", l, "'s experts disagree with ", p, "leading_dense_block_count = ", dense);
}

const GgufNames kDeepseekGgufNames = {
    "model.layers.",
    {{"attn_norm", "input_layernorm"},
     {"attn_q", "self_attn.q_proj"},
     {"attn_q_a", "self_attn.q_a_proj"},
     {"attn_q_a_norm", "self_attn.q_a_layernorm"},
     {"attn_q_b", "self_attn.q_b_proj"},
     {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
     {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
     {"attn_kv_b", "self_attn.kv_b_proj"},
     {"attn_k_b", "self_attn.uk_t.{e}"},
     {"attn_v_b", "self_attn.uv.{e}"},
     {"attn_output", "self_attn.o_proj"},
     {"ffn_norm", "post_attention_layernorm"},
     {"ffn_gate", "mlp.gate_proj"},
     {"ffn_up", "mlp.up_proj"},
     {"ffn_down", "mlp.down_proj"},
     {"ffn_gate_inp", "mlp.gate"},
     {"exp_probs_b", "mlp.gate.e_score_correction"},
     {"ffn_gate_exps", "mlp.experts.{e}.gate_proj"},
     {"ffn_up_exps", "mlp.experts.{e}.up_proj"},
     {"ffn_down_exps", "mlp.experts.{e}.down_proj"},
     {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
     {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
     {"ffn_down_shexp", "mlp.shared_experts.down_proj"}},
    {{"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}}};

// kv_b_proj [heads * (qk_nope + v_head)][kv_lora_rank] split per head: the key rows transposed
// (for absorbing queries), the value rows as they are; each in the stored type where it is a
// half type (exact: the values came from it).
void bind_kv_b(const TensorSource& s, const std::string& name, const ModelConfig& c, LayerWeights& L) {
  const int H = c.n_heads, nope = c.qk_nope_dim, V = c.v_head_dim, R = c.kv_lora_rank;
  const Buffer<float> w = s.read_f32(name, {H * (nope + V), R});
  const DType stored = s.get(name).dtype;
  L.uk_t.resize(H);
  L.uv.resize(H);
  for (int h = 0; h < H; ++h) {
    const float* head = w.data() + static_cast<size_t>(h) * (nope + V) * R;
    Linear& uk = L.uk_t[h];
    uk.out = R, uk.in = nope;
    uk.w = Buffer<float>(static_cast<size_t>(R) * nope);
    for (int i = 0; i < nope; ++i)
      for (int j = 0; j < R; ++j) uk.w[static_cast<size_t>(j) * nope + i] = head[static_cast<size_t>(i) * R + j];
    Linear& uv = L.uv[h];
    uv.out = V, uv.in = R;
    uv.w = Buffer<float>(static_cast<size_t>(V) * R);
    std::copy_n(head + static_cast<size_t>(nope) * R, static_cast<size_t>(V) * R, uv.w.data());
    if (stored == DType::BF16 || stored == DType::F16) uk.convert(stored), uv.convert(stored);
  }
}

void bind_deepseek_v3(const TensorSource& s, Model& m, TensorLayout layout) {
  const ModelConfig& c = m.cfg;
  bind_token_embedding(s, "model.embed_tokens.weight", m);
  const int q_width = c.n_heads * (c.qk_nope_dim + c.qk_rope_dim);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", a = p + "self_attn.";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    if (c.q_lora_rank > 0) {
      L.q_a = bind_linear(s, a + "q_a_proj", c.q_lora_rank, c.dim, false);
      L.q_a_norm = s.read_f32(a + "q_a_layernorm.weight", {c.q_lora_rank});
      L.q_b = bind_linear(s, a + "q_b_proj", q_width, c.q_lora_rank, false);
    } else {
      L.wq = bind_linear(s, a + "q_proj", q_width, c.dim, false);
    }
    L.kv_a = bind_linear(s, a + "kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_dim, c.dim, false);
    L.kv_a_norm = s.read_f32(a + "kv_a_layernorm.weight", {c.kv_lora_rank});
    if (s.has(a + "kv_b_proj.weight")) {  // HF, and GGUF files written before llama.cpp split it
      bind_kv_b(s, a + "kv_b_proj.weight", c, L);
    } else {  // GGUF: per head, the key half already transposed
      L.uk_t.resize(c.n_heads);
      L.uv.resize(c.n_heads);
      for (int h = 0; h < c.n_heads; ++h) {
        L.uk_t[h] = bind_linear(s, a + "uk_t." + std::to_string(h), c.kv_lora_rank, c.qk_nope_dim, false);
        L.uv[h] = bind_linear(s, a + "uv." + std::to_string(h), c.v_head_dim, c.kv_lora_rank, false);
      }
    }
    L.wo = bind_linear(s, a + "o_proj", c.dim, c.n_heads * c.v_head_dim, false);
    L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    if (!c.is_moe_layer(i)) {
      L.w_gate = bind_linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, false);
      L.w_up = bind_linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, false);
      L.w_down = bind_linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, false);
      continue;
    }
    bind_experts(s, p, ExpertNames{"mlp.gate", "mlp.experts.", "gate_proj", "up_proj", "down_proj"}, c, L);
    if (c.route_sigmoid)
      L.router_choice_bias = s.read_f32(
          p + (layout == TensorLayout::Gguf ? "mlp.gate.e_score_correction.bias" : "mlp.gate.e_score_correction_bias"),
          {c.n_experts});
    if (c.shared_hidden_dim > 0) {
      L.shared_expert.gate = bind_linear(s, p + "mlp.shared_experts.gate_proj", c.shared_hidden_dim, c.dim, false);
      L.shared_expert.up = bind_linear(s, p + "mlp.shared_experts.up_proj", c.shared_hidden_dim, c.dim, false);
      L.shared_expert.down = bind_linear(s, p + "mlp.shared_experts.down_proj", c.dim, c.shared_hidden_dim, false);
    }
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  bind_lm_head(s, "model.embed_tokens", m);
}

// Latent attention of one layer: xn [rows][dim] in, out [rows][dim] (o_proj's output).
void latent_attention(ForwardStep& s, const Model& m, int layer, const float* xn, float* latent, float* q, float* att,
                      float* out) {
  const ModelConfig& c = m.cfg;
  const LayerWeights& L = m.layers[layer];
  const int n = s.rows(), H = c.n_heads, R = c.kv_lora_rank, r = c.qk_rope_dim, nope = c.qk_nope_dim;
  const int qh = nope + r, row = R + r;  // a head's projected query; a latent row (and absorbed query)
  enum { kQ = 24, kQa, kKv, kPe, kNope, kLat, kV, kO };
  float* qp = s.act(kQ, static_cast<size_t>(H) * qh);
  if (c.q_lora_rank > 0) {
    float* qa = s.act(kQa, c.q_lora_rank);
    s.ops.linear(L.q_a, xn, n, qa);
    s.ops.rms_norm(qa, L.q_a_norm.data(), qa, n, c.q_lora_rank, 1e-6f);  // transformers' default eps here
    s.ops.linear(L.q_b, qa, n, qp);
  } else {
    s.ops.linear(L.wq, xn, n, qp);
  }
  // The latent row: the normed latent, then the rotated shared key.
  float* kv = s.act(kKv, row);
  float* ql = s.act(kLat, R);
  s.ops.linear(L.kv_a, xn, n, kv);
  s.ops.copy_cols(kv, row, ql, R, n, R);
  s.ops.rms_norm(ql, L.kv_a_norm.data(), ql, n, R, 1e-6f);
  s.ops.copy_cols(ql, R, latent, row, n, R);
  const RopeSpec pe{m.rope.kind == RopeKind::AdjacentPairs, m.rope.inv_freq.data(), r, r};
  float* kpe = s.act(kPe, static_cast<size_t>(H) * r);  // the rotated key, then every head's rotated query
  s.ops.copy_cols(kv + R, row, kpe, r, n, r);
  s.ops.rope(pe, kpe, n, 1, s.positions.data());
  s.ops.copy_cols(kpe, r, latent + R, row, n, r);
  // Absorbed queries: per head [q_nope W_UK ; q_pe].
  float* qn = s.act(kNope, nope);
  for (int h = 0; h < H; ++h) {
    s.ops.copy_cols(qp + h * qh, static_cast<size_t>(H) * qh, qn, nope, n, nope);
    s.ops.linear(L.uk_t[h], qn, n, ql);
    s.ops.copy_cols(ql, R, q + h * row, static_cast<size_t>(H) * row, n, R);
    s.ops.copy_cols(qp + h * qh + nope, static_cast<size_t>(H) * qh, kpe + h * r, static_cast<size_t>(H) * r, n, r);
  }
  s.ops.rope(pe, kpe, n, H, s.positions.data());
  if (c.mla_pe_scale != 1.0f) s.ops.scale(kpe, c.mla_pe_scale, n, H * r);
  for (int h = 0; h < H; ++h)
    s.ops.copy_cols(kpe + h * r, static_cast<size_t>(H) * r, q + h * row + R, static_cast<size_t>(H) * row, n, r);
  s.attention(AttentionParams{layer, H, 1, row, c.attn_scale, 0.0f, c.layer_window[layer]}, q, latent, latent, att);
  // Each head's weighed latent through its value half, then o_proj.
  float* v = s.act(kV, c.v_head_dim);
  float* o = s.act(kO, static_cast<size_t>(H) * c.v_head_dim);
  for (int h = 0; h < H; ++h) {
    s.ops.copy_cols(att + h * row, static_cast<size_t>(H) * row, ql, R, n, R);
    s.ops.linear(L.uv[h], ql, n, v);
    s.ops.copy_cols(v, c.v_head_dim, o + h * c.v_head_dim, static_cast<size_t>(H) * c.v_head_dim, n, c.v_head_dim);
  }
  s.ops.linear(L.wo, o, n, out);
}

void forward_deepseek_v3(ForwardStep& s, const Model& m) {
  const ModelConfig& c = m.cfg;
  const int n = s.rows();
  auto [x, xn, q, k, v, att, gate, up, tmp] = blocks::activations(s, c);
  (void)v;
  blocks::embed(s, m, x, tmp);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layers[l];
    s.ops.rms_norm(x, L.attn_norm.data(), xn, n, c.dim, c.norm_eps);
    latent_attention(s, m, l, xn, k, q, att, tmp);
    s.ops.add(x, tmp, n, c.dim);
    s.ops.rms_norm(x, L.mlp_norm.data(), xn, n, c.dim, c.norm_eps);
    blocks::gated_mlp(s, c, l, L, xn, gate, up, tmp);
    s.ops.add(x, tmp, n, c.dim);
  }
  blocks::rms_head(s, m, x, tmp, xn);
}

}  // namespace

extern const Family kDeepseekV2Family = {"deepseek_v2", "deepseek_v2",       "DeepseekV2ForCausalLM",
                                         nullptr,       deepseek_v2_from_hf, nullptr,
                                         nullptr,       bind_deepseek_v3,    forward_deepseek_v3};
// llama.cpp writes V2 and V3 alike as "deepseek2"; this family reads them.
extern const Family kDeepseekV3Family = {"deepseek_v3",       "deepseek_v3",       "DeepseekV3ForCausalLM",
                                         "deepseek2",         deepseek_v3_from_hf, deepseek_from_gguf,
                                         &kDeepseekGgufNames, bind_deepseek_v3,    forward_deepseek_v3};

}  // namespace kvlm
