#include "model/config.h"

#include <cmath>

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
  need(std::isfinite(attn_softcap) && attn_softcap >= 0 && std::isfinite(final_softcap) && final_softcap >= 0,
       "soft caps must be finite and >= 0");
  need(std::isfinite(rope_local_theta) && rope_local_theta >= 0, "the local RoPE base must be finite and >= 0");
  need(rope_dims >= 0 && rope_dims <= head_dim && rope_dims % 2 == 0,
       "rotary dimensions must be even and at most head_dim");
  need(layer_rope.empty() || static_cast<int>(layer_rope.size()) == n_layers, "layer_rope needs one entry per layer");
  need(std::isfinite(norm_eps), "norm_eps must be finite");
  need(layer_moe.empty() || static_cast<int>(layer_moe.size()) == n_layers, "layer_moe needs one entry per layer");
  need(std::isfinite(swiglu_limit) && swiglu_limit >= 0 && std::isfinite(swiglu_alpha),
       "swiglu_limit must be >= 0 and swiglu_alpha finite");
  if (mla()) {
    need(kv_lora_rank <= 65536 && q_lora_rank >= 0 && q_lora_rank <= 65536 && qk_nope_dim > 0 && qk_nope_dim <= 1024 &&
             qk_rope_dim > 0 && qk_rope_dim <= 1024 && qk_rope_dim % 2 == 0 && v_head_dim > 0 && v_head_dim <= 1024,
         "latent attention's ranks and head widths are out of range");
    need(n_kv_heads == 1 && head_dim == kv_lora_rank + qk_rope_dim,
         "latent attention caches one row of kv_lora_rank + qk_rope_head_dim values per position");
    need(std::isfinite(mla_pe_scale) && mla_pe_scale > 0, "the rotated part's score scale must be positive");
  }
  if (!layer_moe.empty()) {
    need(n_group >= 1 && n_experts % n_group == 0 && topk_group >= 1 && topk_group <= n_group,
         "expert groups must divide the experts, and topk_group must be in 1..n_group");
    need(n_group == 1 || experts_per_token <= topk_group * (n_experts / n_group),
         "the chosen groups must hold at least experts-per-token experts");
    need(n_experts / n_group >= group_top || n_group == 1, "each expert group needs as many experts as it is scored by");
    need(group_top == 1 || group_top == 2, "groups are scored by their best one or two experts");
    need(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0, "routed_scaling_factor must be positive");
    need(shared_hidden_dim >= 0 && shared_hidden_dim <= 262144, "the shared experts' width must be in 0..262144");
    need(n_experts > 0 && n_experts <= 4096, "the expert count must be in 1..4096");
    need(experts_per_token > 0 && experts_per_token <= n_experts, "experts per token must be in 1..the expert count");
    need(expert_hidden_dim > 0 && expert_hidden_dim <= 262144, "the expert MLP width must be in 1..262144");
  }
  // An EOS the model can never produce would make generation run to the length limit silently.
  need(eos_id >= 0 && eos_id < vocab_size, "eos_token_id must be a token id inside the vocabulary");
  need(bos_id >= 0 && bos_id < vocab_size, "bos_token_id must be a token id inside the vocabulary");
  need(std::isfinite(attn_scale) && attn_scale > 0.0f, "attention scale must be a positive finite number");
  need(std::isfinite(embedding_scale) && std::isfinite(residual_scale),
       "embedding and residual multipliers must be finite");
  need(std::isfinite(logit_divisor) && logit_divisor > 0.0f, "the logits' divisor must be a positive finite number");
  // GPT-2 and GPT-Neo project q, k and v from the residual with square matrices: heads must tile it.
  if (learned_positions) {
    need(q_dim() == dim, "the head count must divide the width (n_heads x head_dim must equal dim)");
    need(n_kv_heads == n_heads, "this architecture has no grouped-query attention (n_kv_heads must equal n_heads)");
  }
  if (rope != RopeKind::None) {
    need(std::isfinite(rope_theta) && rope_theta > 0.0f, "rope_theta (freq_base) must be a positive finite number");
    need(rope_scaling.empty() || rope_scaling == "linear" || rope_scaling == "llama3" || rope_scaling == "yarn",
         "unknown rope scaling");
    need(std::isfinite(rope_beta_fast) && std::isfinite(rope_beta_slow) && rope_beta_fast > 0 && rope_beta_slow > 0 &&
             std::isfinite(rope_attn_factor) && rope_attn_factor > 0,
         "YaRN's beta_fast, beta_slow and attention factor must be positive finite numbers");
    // The factor scales rotated values only: with part of each head not rotating it is no score scale.
    need(rope_scaling != "yarn" || rope_attn_factor == 1.0f || rotary_dims() == head_dim || mla(),
         "YaRN's attention factor with partial rotary is not supported");
    need(std::isfinite(rope_factor) && rope_factor > 0.0f, "rope scaling factor must be a positive finite number");
    need(std::isfinite(rope_low_freq_factor) && std::isfinite(rope_high_freq_factor) &&
             rope_high_freq_factor > rope_low_freq_factor,
         "rope high_freq_factor must exceed low_freq_factor");
    need(rope_original_max_pos > 0, "rope original_max_position_embeddings must be positive");
    need(rope_freq_divisors.empty() || static_cast<int>(rope_freq_divisors.size()) == rotary_dims() / 2,
         "rope_freqs needs head_dim/2 entries");
    for (float d : rope_freq_divisors)
      need(std::isfinite(d) && d > 0.0f, "rope_freqs entries must be positive finite numbers");
  }
}

}  // namespace kvlm
