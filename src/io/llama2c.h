// llama2.c "legacy" checkpoint: 7 x int32 header, then f32 tensors grouped over layers.
// Tensors are exposed under Hugging Face Llama names, so one binder serves both formats;
// note the q/k rows are NOT HF-permuted, so the model must use adjacent-pair RoPE.
#pragma once
#include <string>

#include "io/tensor_source.h"

namespace kvlm {

struct Llama2cHeader {
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;  // vocab_size was positive in the file
};

Llama2cHeader read_llama2c(const std::string& path, TensorSource& out);
Llama2cHeader parse_llama2c(const uint8_t* data, size_t size, const std::string& label, TensorSource& out);

}  // namespace kvlm
