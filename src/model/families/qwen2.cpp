// Qwen2 (Qwen2ForCausalLM): Llama with biases on q, k and v only, and sliding windows on the
// layers from max_window_layers on when use_sliding_window is set (or per layer by layer_types).
// GGUF keeps Hugging Face's rotate-half RoPE layout.
#include <algorithm>

#include "model/families/llama.h"

namespace kvlm {

ModelConfig qwen2_like_from_hf(const HfReader& r, const char* arch) {
  ModelConfig c = llama_like_from_hf(r, arch);
  const bool use_windows = r.boolean_or("use_sliding_window", false);
  if (!use_windows && !r.has("layer_types")) return c;
  const int window = r.integer_or("sliding_window", 0);
  if (r.has("layer_types")) {
    std::fill(c.layer_window.begin(), c.layer_window.end(), window);
    apply_layer_types(r, c, window);
  } else if (window > 0) {  // HF's Qwen2Attention: only layers from max_window_layers on slide
    const int first = r.integer_or("max_window_layers", 28);
    for (int i = 0; i < static_cast<int>(c.layer_window.size()); ++i) c.layer_window[i] = i >= first ? window : 0;
  }
  return c;
}

namespace {

ModelConfig qwen2_from_hf(const HfReader& r) {
  ModelConfig c = qwen2_like_from_hf(r, "qwen2");
  c.qkv_bias = 1;
  c.o_bias = c.mlp_bias = 0;
  return c;
}

void qwen2_from_gguf(const GgufFile& g, const std::string& p, ModelConfig& c) {
  llama_like_from_gguf(g, p, c);
  c.rope = RopeKind::RotateHalf;
}

}  // namespace

extern const Family kQwen2Family = {"qwen2",         "qwen2",          "Qwen2ForCausalLM", "qwen2",      qwen2_from_hf,
                                    qwen2_from_gguf, &kLlamaGgufNames, bind_llama_like,    forward_llama};

}  // namespace kvlm
