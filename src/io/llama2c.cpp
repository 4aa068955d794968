#include "io/llama2c.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace kvlm {

Llama2cHeader parse_llama2c(const uint8_t* data, size_t size, const std::string& label, TensorSource& out) {
  if (size < 28)
    fail(label, ": not a llama2.c checkpoint, GGUF file or Hugging Face folder (", size,
         " bytes, too small for the llama2.c header of 28 bytes)");
  int32_t h[7];
  std::memcpy(h, data, 28);
  // A negative vocab_size means "no shared classifier"; INT32_MIN has no positive twin, so the
  // magnitude saturates (and fails the range check below).
  const int32_t vocab = h[5] == INT32_MIN ? INT32_MAX : h[5] < 0 ? -h[5] : h[5];
  Llama2cHeader hd{h[0], h[1], h[2], h[3], h[4], vocab, h[6], h[5] > 0};
  auto check = [&](int v, int lo, int hi, const char* what) {
    // llama2.c files have no magic: a header that makes no sense means "not such a file" first.
    if (v < lo || v > hi)
      fail(label, ": not a llama2.c checkpoint, GGUF file or Hugging Face folder (read as llama2.c, header field ",
           what, " = ", v, " is out of range [", lo, ", ", hi, "])");
  };
  check(hd.dim, 1, 65536, "dim");
  check(hd.hidden_dim, 1, 262144, "hidden_dim");
  check(hd.n_layers, 1, 1024, "n_layers");
  check(hd.n_heads, 1, 1024, "n_heads");
  check(hd.n_kv_heads, 1, hd.n_heads, "n_kv_heads");
  check(hd.vocab_size, 1, 4 * 1024 * 1024, "vocab_size");
  check(hd.seq_len, 1, 16 * 1024 * 1024, "seq_len");
  if (hd.dim % hd.n_heads != 0) fail(label, ": dim ", hd.dim, " is not a multiple of n_heads ", hd.n_heads);
  const int64_t head = hd.dim / hd.n_heads, kv_dim = head * hd.n_kv_heads;
  const int64_t L = hd.n_layers, D = hd.dim, H = hd.hidden_dim, V = hd.vocab_size;

  size_t off = 28;
  // Declares the next tensor block (one per layer when per_layer) and checks it fits the file.
  auto take = [&](const std::string& what, const std::vector<int64_t>& shape, int layers,
                  const std::string& name_pattern) {
    uint64_t per = 4;
    for (int64_t d : shape) per = checked_mul(per, static_cast<uint64_t>(d), label + ": " + what);
    uint64_t total = checked_mul(per, static_cast<uint64_t>(layers), label + ": " + what);
    if (total > size - off)
      fail(label, ": truncated: tensor ", what, " needs ", total, " bytes at offset ", off, " but the file is ",
           size, " bytes");
    for (int l = 0; l < layers; ++l) {
      if (name_pattern.empty()) break;
      auto p = name_pattern.find("{}");
      std::string name = p == std::string::npos
                             ? name_pattern
                             : name_pattern.substr(0, p) + std::to_string(l) + name_pattern.substr(p + 2);
      TensorInfo t;
      t.name = name;
      t.dtype = DType::F32;
      t.shape = shape;
      t.data = data + off + l * per;
      t.nbytes = per;
      t.file = label;
      out.add(std::move(t));
    }
    off += total;
  };
  const std::string P = "model.layers.{}.";
  take("token_embedding", {V, D}, 1, "model.embed_tokens.weight");
  take("rms_att", {D}, hd.n_layers, P + "input_layernorm.weight");
  take("wq", {D, D}, hd.n_layers, P + "self_attn.q_proj.weight");
  take("wk", {kv_dim, D}, hd.n_layers, P + "self_attn.k_proj.weight");
  take("wv", {kv_dim, D}, hd.n_layers, P + "self_attn.v_proj.weight");
  take("wo", {D, D}, hd.n_layers, P + "self_attn.o_proj.weight");
  take("rms_ffn", {D}, hd.n_layers, P + "post_attention_layernorm.weight");
  take("w1", {H, D}, hd.n_layers, P + "mlp.gate_proj.weight");
  take("w2", {D, H}, hd.n_layers, P + "mlp.down_proj.weight");
  take("w3", {H, D}, hd.n_layers, P + "mlp.up_proj.weight");
  take("rms_final", {D}, 1, "model.norm.weight");
  take("freq_cis (unused)", {hd.seq_len, head / 2}, 2, "");
  if (!hd.shared_classifier) take("wcls", {V, D}, 1, "lm_head.weight");
  (void)L;
  return hd;
}

Llama2cHeader read_llama2c(const std::string& path, TensorSource& out) {
  auto file = std::make_shared<MappedFile>(path);
  Llama2cHeader h = parse_llama2c(file->data(), file->size(), path, out);
  out.add_file(std::move(file));
  return h;
}

}  // namespace kvlm
