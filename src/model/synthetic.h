// Built-in model shapes with synthetic weights (seeded normal, std 0.02): benchmarks run on
// real architectures' sizes with nothing to download.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace kvlm {

// "distilgpt2", "gpt2", "gpt-neo-1.3B", "tinyllama-1.1b".
std::vector<std::string> preset_names();
ModelConfig preset_config(const std::string& name);  // throws on an unknown name
std::unique_ptr<Model> synthetic_model(const ModelConfig& cfg, uint64_t seed = 0);
// A Llama of this shape (RoPE, SwiGLU, untied head, attention scale 1/sqrt(head_dim)): the
// presets use it, and tests and fuzz targets that need a small one.
ModelConfig llama_shape(int layers, int dim, int hidden, int heads, int kv_heads, int head_dim, int vocab, int ctx);
// Bytes of the f32 weights synthetic_model would allocate (for planning without building it).
size_t synthetic_model_bytes(const ModelConfig& cfg);

// Token ids of "What is KV caching?" in the preset's vocabulary (GPT-2 BPE or Llama SPM).
std::vector<int> preset_prompt_ids(const ModelConfig& cfg);

}  // namespace kvlm
