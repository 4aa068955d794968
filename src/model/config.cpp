#include "model/config.h"

#include "core/error.h"

namespace kvlm {

void ModelConfig::validate(const std::string& source) const {
  auto need = [&](bool ok, const char* what) {
    if (!ok) fail(source, ": invalid config: ", what);
  };
  // Bounds keep every derived size far from overflow (the largest is vocab x dim floats).
  need(dim > 0 && dim <= 65536, "dim must be in 1..65536");
  need(hidden_dim > 0 && hidden_dim <= 262144, "hidden_dim must be in 1..262144");
  need(n_layers > 0 && n_layers <= 1024, "n_layers must be in 1..1024");
  need(n_heads > 0 && n_heads <= 1024, "n_heads must be in 1..1024");
  need(n_kv_heads > 0 && n_kv_heads <= n_heads, "n_kv_heads must be in 1..n_heads");
  need(n_heads % n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  need(head_dim > 0 && head_dim <= 1024, "head_dim must be in 1..1024");
  need(rope == RopeKind::None || head_dim % 2 == 0, "head_dim must be even for RoPE");
  need(vocab_size > 0 && vocab_size <= 4 * 1024 * 1024, "vocab_size must be in 1..4M");
  need(max_seq_len > 0 && max_seq_len <= 16 * 1024 * 1024, "max_seq_len must be in 1..16M");
  need(norm_eps > 0.0f && norm_eps < 1.0f, "norm_eps must be in (0, 1)");
  need(static_cast<int>(layer_window.size()) == n_layers, "layer_window needs one entry per layer");
  for (int w : layer_window) need(w >= 0, "window sizes must be >= 0");
}

}  // namespace kvlm
