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
// Bytes of the f32 weights synthetic_model would allocate (for planning without building it).
size_t synthetic_model_bytes(const ModelConfig& cfg);

// Token ids of "What is KV caching?" in the preset's vocabulary (GPT-2 BPE or Llama SPM).
std::vector<int> preset_prompt_ids(const ModelConfig& cfg);

}  // namespace kvlm
