#include "model/bind_weights.h"

#include "core/error.h"
#include "kernels/qgemm.h"

namespace kvlm {

Linear bind_linear(const TensorSource& s, const std::string& name, int out, int in, bool bias) {
  Linear l;
  l.out = out;
  l.in = in;
  const TensorInfo& t = s.get(name + ".weight");
  if ((t.dtype == DType::Q8_0 || t.dtype == DType::Q4_0) && t.shape == std::vector<int64_t>{out, in} &&
      t.nbytes == static_cast<size_t>(out) * dtype_row_bytes(t.dtype, in, t.name)) {
    l.fmt = t.dtype;
    l.packed = pack_gguf_blocks(l.fmt, t.data, out, in);
  } else {
    l.w = s.read_f32(name + ".weight", {out, in});
  }
  if (bias) l.b = s.read_f32(name + ".bias", {out});
  return l;
}

Linear bind_conv1d(const TensorSource& s, const std::string& name, int in, int out) {
  Buffer<float> w = s.read_f32(name + ".weight", {in, out});
  Linear l;
  l.out = out;
  l.in = in;
  l.w.resize(w.size());
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) l.w[static_cast<size_t>(o) * in + i] = w[static_cast<size_t>(i) * out + o];
  l.b = s.read_f32(name + ".bias", {out});
  return l;
}

Linear split_rows(const Linear& packed_or_f32, int first, int count) {
  Linear fused = packed_or_f32;
  fused.convert(DType::F32);
  Linear l;
  l.out = count;
  l.in = fused.in;
  l.w.assign(fused.w.begin() + static_cast<size_t>(first) * fused.in,
             fused.w.begin() + static_cast<size_t>(first + count) * fused.in);
  l.b.assign(fused.b.begin() + first, fused.b.begin() + first + count);
  return l;
}

bool has_bias(const TensorSource& s, int configured, const std::string& tensor, const char* key) {
  if (configured < 0) return s.has(tensor);
  if (!configured && s.has(tensor))
    fail("model has tensor ", tensor, " but its config says ", key, " is false; refusing to ignore it");
  return configured != 0;
}

std::string gpt_prefix(const TensorSource& s) { return s.has("transformer.wte.weight") ? "transformer." : ""; }

namespace {

void bind_gpt_norms_and_mlp(const TensorSource& s, const std::string& lp, const ModelConfig& c, LayerWeights& L,
                            bool conv) {
  L.attn_norm = s.read_f32(lp + "ln_1.weight", {c.dim});
  L.attn_norm_bias = s.read_f32(lp + "ln_1.bias", {c.dim});
  L.mlp_norm = s.read_f32(lp + "ln_2.weight", {c.dim});
  L.mlp_norm_bias = s.read_f32(lp + "ln_2.bias", {c.dim});
  if (conv) {
    L.w_up = bind_conv1d(s, lp + "mlp.c_fc", c.dim, c.hidden_dim);
    L.w_down = bind_conv1d(s, lp + "mlp.c_proj", c.hidden_dim, c.dim);
  } else {
    L.w_up = bind_linear(s, lp + "mlp.c_fc", c.hidden_dim, c.dim, true);
    L.w_down = bind_linear(s, lp + "mlp.c_proj", c.dim, c.hidden_dim, true);
  }
}

}  // namespace

void bind_gpt_like(const TensorSource& s, Model& m, bool conv,
                   const std::function<void(const std::string&, LayerWeights&)>& attention) {
  const ModelConfig& c = m.cfg;
  // HF checkpoints keep the tensors under "transformer."; GGUF-renamed ones at the top.
  const std::string p = s.has("transformer.wte.weight") ? "transformer." : "";
  m.tok_emb = s.read_f32(p + "wte.weight", {c.vocab_size, c.dim});
  m.pos_emb = s.read_f32(p + "wpe.weight", {c.max_seq_len, c.dim});
  m.final_norm = s.read_f32(p + "ln_f.weight", {c.dim});
  m.final_norm_bias = s.read_f32(p + "ln_f.bias", {c.dim});
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string lp = p + "h." + std::to_string(i) + ".";
    bind_gpt_norms_and_mlp(s, lp, c, m.layers[i], conv);
    attention(lp, m.layers[i]);
  }
  if (!c.tied_embeddings) m.lm_head = bind_linear(s, "lm_head", c.vocab_size, c.dim, false);
}

}  // namespace kvlm
