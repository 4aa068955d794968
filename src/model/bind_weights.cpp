#include "model/bind_weights.h"

#include "core/error.h"
#include "kernels/qgemm.h"

namespace kvlm {

namespace {

using Shape = std::vector<int64_t>;

// nn.Linear stores [out][in], which is our layout. GGUF Q8_0 / Q4_0 matrices are packed from
// their blocks as stored: no f32 copy of the model is ever made for them.
Linear linear(const TensorSource& s, const std::string& name, int out, int in, bool bias) {
  Linear l;
  l.out = out;
  l.in = in;
  const TensorInfo& t = s.get(name + ".weight");
  if ((t.dtype == DType::Q8_0 || t.dtype == DType::Q4_0) && t.shape == std::vector<int64_t>{out, in} &&
      t.nbytes == static_cast<size_t>(out) * dtype_row_bytes(t.dtype, in, t.name)) {
    l.fmt = t.dtype == DType::Q8_0 ? WeightFormat::Q8_0 : WeightFormat::Q4_0;
    l.packed = pack_gguf_blocks(l.fmt, t.data, out, in);
  } else {
    l.w = s.read_f32(name + ".weight", {out, in});
  }
  if (bias) l.b = s.read_f32(name + ".bias", {out});
  return l;
}

// GPT-2's Conv1D stores [in][out]; transpose once at load.
Linear conv1d(const TensorSource& s, const std::string& name, int in, int out) {
  std::vector<float> w = s.read_f32(name + ".weight", {in, out});
  Linear l;
  l.out = out;
  l.in = in;
  l.w.resize(w.size());
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) l.w[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
  l.b = s.read_f32(name + ".bias", {out});
  return l;
}

// Splits a fused [3*d][in] projection (GPT-2 c_attn) into q, k, v.
Linear rows(const Linear& packed_or_f32, int first, int count) {
  Linear fused = packed_or_f32;
  fused.convert(WeightFormat::F32);
  Linear l;
  l.out = count;
  l.in = fused.in;
  l.w.assign(fused.w.begin() + static_cast<size_t>(first) * fused.in,
             fused.w.begin() + static_cast<size_t>(first + count) * fused.in);
  l.b.assign(fused.b.begin() + first, fused.b.begin() + first + count);
  return l;
}

// GPT-2 and GPT-Neo tensors live under "transformer." in HF checkpoints, or at the top.
std::string gpt_prefix(const TensorSource& s) { return s.has("transformer.wte.weight") ? "transformer." : ""; }

void bind_learned_embeddings(const TensorSource& s, const std::string& p, Model& m) {
  const ModelConfig& c = m.cfg;
  m.tok_emb = s.read_f32(p + "wte.weight", {c.vocab_size, c.dim});
  m.pos_emb = s.read_f32(p + "wpe.weight", {c.max_seq_len, c.dim});
  m.final_norm = s.read_f32(p + "ln_f.weight", {c.dim});
  m.final_norm_bias = s.read_f32(p + "ln_f.bias", {c.dim});
}

void bind_gpt_layer_norms_and_mlp(const TensorSource& s, const std::string& lp, const ModelConfig& c,
                                  LayerWeights& L, bool conv) {
  // conv: HF Conv1D [in][out] layout; otherwise nn.Linear [out][in].
  L.attn_norm = s.read_f32(lp + "ln_1.weight", {c.dim});
  L.attn_norm_bias = s.read_f32(lp + "ln_1.bias", {c.dim});
  L.mlp_norm = s.read_f32(lp + "ln_2.weight", {c.dim});
  L.mlp_norm_bias = s.read_f32(lp + "ln_2.bias", {c.dim});
  if (conv) {
    L.w_up = conv1d(s, lp + "mlp.c_fc", c.dim, c.hidden_dim);
    L.w_down = conv1d(s, lp + "mlp.c_proj", c.hidden_dim, c.dim);
  } else {
    L.w_up = linear(s, lp + "mlp.c_fc", c.hidden_dim, c.dim, true);
    L.w_down = linear(s, lp + "mlp.c_proj", c.dim, c.hidden_dim, true);
  }
}

// Whether a projection has a bias: the config's word when it has one (a bias tensor it does not
// expect is refused, never dropped), else whether the file holds the tensor.
bool has_bias(const TensorSource& s, int configured, const std::string& tensor, const char* key) {
  if (configured < 0) return s.has(tensor);
  if (!configured && s.has(tensor))
    fail("model has tensor ", tensor, " but its config says ", key, " is false; refusing to ignore it");
  return configured != 0;
}

}  // namespace

void bind_llama(const TensorSource& s, Model& m) {
  const ModelConfig& c = m.cfg;
  m.tok_emb = s.read_f32("model.embed_tokens.weight", {c.vocab_size, c.dim});
  bool qkv_bias = has_bias(s, c.qkv_bias, "model.layers.0.self_attn.q_proj.bias", "attention_bias");
  bool o_bias = has_bias(s, c.o_bias, "model.layers.0.self_attn.o_proj.bias", "attention_bias");
  bool mlp_bias = has_bias(s, c.mlp_bias, "model.layers.0.mlp.gate_proj.bias", "mlp_bias");
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    L.attn_norm = s.read_f32(p + "input_layernorm.weight", {c.dim});
    L.wq = linear(s, p + "self_attn.q_proj", c.q_dim(), c.dim, qkv_bias);
    L.wk = linear(s, p + "self_attn.k_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wv = linear(s, p + "self_attn.v_proj", c.kv_dim(), c.dim, qkv_bias);
    L.wo = linear(s, p + "self_attn.o_proj", c.dim, c.q_dim(), o_bias);
    L.mlp_norm = s.read_f32(p + "post_attention_layernorm.weight", {c.dim});
    L.w_gate = linear(s, p + "mlp.gate_proj", c.hidden_dim, c.dim, mlp_bias);
    L.w_up = linear(s, p + "mlp.up_proj", c.hidden_dim, c.dim, mlp_bias);
    L.w_down = linear(s, p + "mlp.down_proj", c.dim, c.hidden_dim, mlp_bias);
  }
  m.final_norm = s.read_f32("model.norm.weight", {c.dim});
  if (!c.tied_embeddings) m.lm_head = linear(s, "lm_head", c.vocab_size, c.dim, false);
}

void bind_gpt2(const TensorSource& s, Model& m, bool conv1d_layout) {
  const ModelConfig& c = m.cfg;
  std::string p = gpt_prefix(s);
  bind_learned_embeddings(s, p, m);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    std::string lp = p + "h." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    bind_gpt_layer_norms_and_mlp(s, lp, c, L, conv1d_layout);
    Linear qkv = conv1d_layout ? conv1d(s, lp + "attn.c_attn", c.dim, 3 * c.dim)
                               : linear(s, lp + "attn.c_attn", 3 * c.dim, c.dim, true);
    L.wq = rows(qkv, 0, c.dim);
    L.wk = rows(qkv, c.dim, c.dim);
    L.wv = rows(qkv, 2 * c.dim, c.dim);
    L.wo = conv1d_layout ? conv1d(s, lp + "attn.c_proj", c.dim, c.dim) : linear(s, lp + "attn.c_proj", c.dim, c.dim, true);
  }
  if (!c.tied_embeddings) m.lm_head = linear(s, "lm_head", c.vocab_size, c.dim, false);
}

void bind_gpt_neo(const TensorSource& s, Model& m) {
  const ModelConfig& c = m.cfg;
  std::string p = gpt_prefix(s);
  bind_learned_embeddings(s, p, m);
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    std::string lp = p + "h." + std::to_string(i) + ".";
    LayerWeights& L = m.layers[i];
    bind_gpt_layer_norms_and_mlp(s, lp, c, L, /*conv=*/false);
    std::string a = lp + "attn.attention.";
    L.wq = linear(s, a + "q_proj", c.dim, c.dim, false);
    L.wk = linear(s, a + "k_proj", c.dim, c.dim, false);
    L.wv = linear(s, a + "v_proj", c.dim, c.dim, false);
    L.wo = linear(s, a + "out_proj", c.dim, c.dim, true);
  }
  if (!c.tied_embeddings) m.lm_head = linear(s, "lm_head", c.vocab_size, c.dim, false);
}

}  // namespace kvlm
