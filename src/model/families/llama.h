// What Mistral and Qwen2 share with Llama (they are Llama with other bias and window rules).
#pragma once
#include "model/family.h"

namespace kvlm {

// The Llama keys of config.json: shapes, RMSNorm, SwiGLU, rotate-half RoPE with its scaling.
// Biases are left for the family to set; every layer's window is 0.
ModelConfig llama_like_from_hf(const HfReader& r, const char* arch);
// layer_types (transformers >= 5): "sliding_attention" layers get `window`, the rest 0.
void apply_layer_types(const HfReader& r, ModelConfig& c, int window);
// GGUF: RMSNorm epsilon, SwiGLU, RoPE base/scaling and Llama 3's rope_freqs. The caller sets the
// rotation convention (llama.cpp permutes llama's q/k rows to adjacent pairs, not qwen2's).
void llama_like_from_gguf(const GgufFile& g, const std::string& prefix, ModelConfig& c);
void bind_llama_like(const TensorSource& s, Model& m, TensorLayout layout);
extern const GgufNames kLlamaGgufNames;

}  // namespace kvlm
