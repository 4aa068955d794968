// What Mistral, Qwen2 and Qwen3 share with Llama (Llama with other bias, window and norm rules).
#pragma once
#include "model/bind_weights.h"
#include "model/family.h"

namespace kvlm {

// The shape keys llama-like configs share (hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, vocab_size, max_position_embeddings); head_dim from
// its key where the family reads one (absent: head_dim_default, or hidden / heads when 0), else
// hidden / heads. Every layer's window starts at 0.
void read_hf_shapes(const HfReader& r, ModelConfig& c, bool head_dim_key, int head_dim_default = 0);
// The Llama keys of config.json: shapes, RMSNorm, SwiGLU, rotate-half RoPE with its scaling.
// Biases are left for the family to set; every layer's window is 0.
// partial_rotary: the family rotates part of each head where partial_rotary_factor says so
// (else a factor below 1 is refused); yarn: the family takes YaRN scaling (else refused).
ModelConfig llama_like_from_hf(const HfReader& r, const char* arch, bool partial_rotary = false, bool yarn = false);
// RoPE theta, scaling and partial_rotary_factor (top level or inside) from rope_theta +
// rope_scaling or rope_parameters (flat, or keyed by layer type: the sliding layers' own base
// becomes rope_local_theta).
void read_hf_rope(const HfReader& r, ModelConfig& c, bool partial_rotary = false, bool yarn = false);
// layer_types (transformers >= 5): "sliding_attention" layers get `window`, the rest 0.
void apply_layer_types(const HfReader& r, ModelConfig& c, int window);
// GGUF: RMSNorm epsilon, SwiGLU, RoPE base/scaling and Llama 3's rope_freqs. The caller sets the
// rotation convention (llama.cpp permutes llama's q/k rows to adjacent pairs, not qwen2's).
void llama_like_from_gguf(const GgufFile& g, const std::string& prefix, ModelConfig& c, bool yarn = false);
// attention.sliding_window_pattern (one bool per layer): the listed layers slide over `window`,
// the rest are global; nothing when the file has no pattern.
void read_gguf_window_pattern(const GgufFile& g, const std::string& prefix, ModelConfig& c, int window);
// rope.*: freq_base, the rotated width (rope.dimension_count below head_dim: partial rotary) and
// linear scaling (rope.scaling.type/factor or the older rope.scale_linear) are honoured; YaRN,
// LongRoPE refused, and YaRN and attn_factor != 1 unless `yarn`. The caller sets the rotation
// convention.
// yarn: the family takes rope.scaling.type yarn (factor, original_context_length, yarn_beta_fast,
// yarn_beta_slow, attn_factor, as llama.cpp reads them); else refused.
void read_gguf_rope(const GgufFile& g, const std::string& prefix, ModelConfig& c, bool yarn = false);
void bind_llama_like(const TensorSource& s, Model& m, TensorLayout layout);
// The same, with the MoE layers' experts under `experts` (Mixtral's names in bind_llama_like).
void bind_llama_layers(const TensorSource& s, Model& m, const ExpertNames& experts);
// Mixtral's MoE tensor names (llama.cpp writes Mixtral as "llama").
extern const ExpertNames kMixtralExperts;
// The Llama layer: RMSNorm, q/k/v (biases where bound), RoPE, attention, SwiGLU.
void forward_llama(ForwardStep& s, const Model& m);
// The config.json keys of a softmax-routed MoE (Mixtral's, Qwen3-MoE's) after the family set
// n_experts and the routing rule: experts_per_token from num_experts_per_tok; every layer MoE
// unless the family marks some dense after.
void read_hf_experts(const HfReader& r, ModelConfig& c, int n_experts, int expert_hidden_dim);
// Mistral's keys: Llama's without biases, one sliding window for every layer (or by layer_types).
ModelConfig mistral_like_from_hf(const HfReader& r, const char* arch);
// Qwen2's keys: Llama's plus its window rules (use_sliding_window from max_window_layers on,
// or layer_types). Biases are left for the family to set.
ModelConfig qwen2_like_from_hf(const HfReader& r, const char* arch);
extern const GgufNames kLlamaGgufNames;

}  // namespace kvlm
