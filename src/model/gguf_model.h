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

}  // namespace kvlm
