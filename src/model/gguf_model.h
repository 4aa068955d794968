// GGUF metadata -> ModelConfig, and GGUF tensors -> Model weights, through the file's family.
#pragma once
#include <memory>

#include "io/gguf.h"
#include "model/model.h"

namespace kvlm {

ModelConfig gguf_config(const GgufFile& g);
std::unique_ptr<Model> load_gguf_model(const GgufFile& g);
// The matrices' type in the file: the first layer's query (or fused QKV) matrix's.
DType gguf_matrix_type(const GgufFile& g);

// Metadata helpers for the families: an integer in [lo, hi], a finite float (fallback if absent).
int gguf_int(const GgufFile& g, const std::string& key, int lo, int hi);
double gguf_float(const GgufFile& g, const std::string& key, double fallback);
// A mixture-of-experts file's keys (expert_count, expert_used_count, expert_feed_forward_length,
// expert_weights_norm, which defaults to renormalizing the chosen weights as llama.cpp does for
// softmax routing); a layer is MoE where the file holds its router (blk.N.ffn_gate_inp). No
// expert_count, or 0: a dense model, nothing set.
void read_gguf_experts(const GgufFile& g, const std::string& prefix, ModelConfig& c);

}  // namespace kvlm
