// Mistral (MistralForCausalLM): Llama without biases, with one sliding window for every layer
// (or per layer by layer_types). llama.cpp writes Mistral GGUF files as "llama".
#include <algorithm>

#include "model/families/llama.h"

namespace kvlm {

ModelConfig mistral_like_from_hf(const HfReader& r, const char* arch) {
  ModelConfig c = llama_like_from_hf(r, arch);
  c.qkv_bias = c.o_bias = c.mlp_bias = 0;
  int window = r.integer_or("sliding_window", 0);
  std::fill(c.layer_window.begin(), c.layer_window.end(), window);
  apply_layer_types(r, c, window);
  return c;
}

namespace {

ModelConfig mistral_from_hf(const HfReader& r) { return mistral_like_from_hf(r, "mistral"); }

}  // namespace

extern const Family kMistralFamily = {"mistral", "mistral", "MistralForCausalLM", nullptr,      mistral_from_hf,
                                      nullptr,   nullptr,   bind_llama_like,      forward_llama};

}  // namespace kvlm
