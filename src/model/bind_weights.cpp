#include "model/bind_weights.h"

#include <cstring>

#include "core/error.h"
#include "kernels/qgemm.h"
#include "kernels/row_dot.h"

namespace kvlm {

namespace {

// t's bytes as a buffer of T: borrowed from the mapping where they are aligned for T, else copied.
template <class T>
Buffer<T> stored_as(const TensorSource& s, const TensorInfo& t) {
  const size_t n = t.nbytes / sizeof(T);
  auto owner = s.owner_of(t);
  if (owner && reinterpret_cast<uintptr_t>(t.data) % alignof(T) == 0) {
    s.populate(t);
    return Buffer<T>::borrow(reinterpret_cast<const T*>(t.data), n, std::move(owner));
  }
  Buffer<T> copy(n);
  std::memcpy(copy.data(), t.data, t.nbytes);
  return copy;
}

}  // namespace

Linear bind_linear(const TensorSource& s, const std::string& name, int out, int in, bool bias) {
  Linear l;
  l.out = out;
  l.in = in;
  const TensorInfo& t = s.get(name + ".weight");
  const bool row_major = t.shape == std::vector<int64_t>{out, in} &&
                         t.nbytes == static_cast<size_t>(out) * dtype_row_bytes(t.dtype, in, t.name);
  // Each matrix runs in its stored type: the halves, f32 and the row-quant types straight from the
  // mapping; Q8_0 / Q4_0 repacked (the file's pages then go); a matrix of another shape widens.
  // (Q8_0 from the mapping was tried: rows packed on the fly each step cost decode 40%, and a
  // row-major kernel cost prefill 1.6x and summed in another order than the batched kernel.)
  if (row_major && (t.dtype == DType::Q8_0 || t.dtype == DType::Q4_0)) {
    l.fmt = t.dtype;
    l.packed = pack_gguf_blocks(l.fmt, t.data, out, in);
    s.drop_pages(t);
  } else if (row_major && is_row_quant(t.dtype)) {
    l.fmt = t.dtype;
    l.packed = stored_as<uint8_t>(s, t);
  } else if (row_major && (t.dtype == DType::F16 || t.dtype == DType::BF16)) {
    l.fmt = t.dtype;
    l.w16 = stored_as<uint16_t>(s, t);
  } else if (row_major && t.dtype == DType::F32) {
    l.w = stored_as<float>(s, t);
  } else {
    l.w = s.read_f32(name + ".weight", {out, in});
  }
  if (bias) l.b = s.read_f32(name + ".bias", {out});
  return l;
}

void bind_token_embedding(const TensorSource& s, const std::string& name, Model& m) {
  const TensorInfo& t = s.get(name, {m.cfg.vocab_size, m.cfg.dim});
  m.tok_emb_type = t.dtype;
  if (t.dtype == DType::F32)
    m.tok_emb = stored_as<float>(s, t);
  else  // a row is widened per token: no f32 copy of the whole table (262 MB at TinyLlama's size)
    m.tok_emb_rows = stored_as<uint8_t>(s, t);
}

void bind_lm_head(const TensorSource& s, const std::string& embedding, Model& m) {
  const ModelConfig& c = m.cfg;
  if (!c.tied_embeddings) {
    m.lm_head = bind_linear(s, "lm_head", c.vocab_size, c.dim, false);
    return;
  }
  // Tied: an f32 table is read in place by the forward; a stored half or block type runs as the
  // head in that type (never widened into a second f32 copy, never narrowed).
  if (s.get(embedding + ".weight").dtype != DType::F32)
    m.lm_head = bind_linear(s, embedding, c.vocab_size, c.dim, false);
}

void bind_experts(const TensorSource& s, const std::string& layer_prefix, const ExpertNames& names,
                  const ModelConfig& c, LayerWeights& L) {
  // Biases where the file holds them (gpt-oss's router and experts), for all experts alike.
  const std::string first = layer_prefix + names.experts + "0.";
  L.router =
      bind_linear(s, layer_prefix + names.router, c.n_experts, c.dim, s.has(layer_prefix + names.router + ".bias"));
  const bool gate_bias = s.has(first + names.gate + ".bias"), up_bias = s.has(first + names.up + ".bias"),
             down_bias = s.has(first + names.down + ".bias");
  L.experts.resize(c.n_experts);
  for (int e = 0; e < c.n_experts; ++e) {
    const std::string p = layer_prefix + names.experts + std::to_string(e) + ".";
    L.experts[e].gate = bind_linear(s, p + names.gate, c.expert_hidden_dim, c.dim, gate_bias);
    L.experts[e].up = bind_linear(s, p + names.up, c.expert_hidden_dim, c.dim, up_bias);
    L.experts[e].down = bind_linear(s, p + names.down, c.dim, c.expert_hidden_dim, down_bias);
  }
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

Linear split_rows(const Linear& fused, int first, int count) {
  // The part keeps the fused matrix's type: rows are sliced as stored (packed Q8_0 / Q4_0 by whole
  // groups of 8 rows); a split inside a group goes through f32 and re-encodes, which is exact for
  // Q8_0 / Q4_0 (same scales, same quants).
  Linear l;
  l.out = count;
  l.in = fused.in;
  l.fmt = fused.fmt;
  if (!fused.b.empty()) l.b.assign(fused.b.begin() + first, fused.b.begin() + first + count);
  const size_t in = static_cast<size_t>(fused.in);
  switch (fused.fmt) {
    case DType::F32:
      l.w.assign(fused.w.begin() + first * in, fused.w.begin() + (first + count) * in);
      return l;
    case DType::F16:
    case DType::BF16:
      l.w16.assign(fused.w16.begin() + first * in, fused.w16.begin() + (first + count) * in);
      return l;
    default:
      break;
  }
  if (is_row_quant(fused.fmt)) {
    const size_t row = fused.packed.size() / fused.out;
    l.packed.assign(fused.packed.begin() + first * row, fused.packed.begin() + (first + count) * row);
    return l;
  }
  if (first % kGroupRows == 0 && count % kGroupRows == 0) {
    const size_t group = q_group_bytes(fused.fmt, fused.in / 32);
    l.packed.assign(fused.packed.begin() + first / kGroupRows * group,
                    fused.packed.begin() + (first + count) / kGroupRows * group);
    return l;
  }
  Linear wide = fused;
  wide.convert(DType::F32);
  Linear part = split_rows(wide, first, count);
  part.convert(fused.fmt);
  return part;
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
  bind_token_embedding(s, p + "wte.weight", m);
  m.pos_emb = s.read_f32(p + "wpe.weight", {c.max_seq_len, c.dim});
  m.final_norm = s.read_f32(p + "ln_f.weight", {c.dim});
  m.final_norm_bias = s.read_f32(p + "ln_f.bias", {c.dim});
  m.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string lp = p + "h." + std::to_string(i) + ".";
    bind_gpt_norms_and_mlp(s, lp, c, m.layers[i], conv);
    attention(lp, m.layers[i]);
  }
  bind_lm_head(s, p + "wte", m);
}

}  // namespace kvlm
