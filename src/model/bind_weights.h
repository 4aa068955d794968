// Helpers the families use to bind named tensors to Model weights (families/*.cpp).
#pragma once
#include <string>

#include "io/tensor_source.h"
#include "model/model.h"

namespace kvlm {

// nn.Linear [out][in], our layout. GGUF Q8_0 / Q4_0 matrices are packed from their blocks as
// stored: no f32 copy of the model is made for them.
Linear bind_linear(const TensorSource& s, const std::string& name, int out, int in, bool bias);
// HF Conv1D [in][out] (GPT-2), transposed once at load; always has a bias.
Linear bind_conv1d(const TensorSource& s, const std::string& name, int in, int out);
// Rows [first, first + count) of a fused projection (GPT-2's c_attn holds q, k and v).
Linear split_rows(const Linear& fused, int first, int count);
// Whether a projection has a bias: the config's word when it has one (1 or 0; a bias tensor it
// does not expect is refused, never dropped), else (-1) whether the file holds the tensor.
bool has_bias(const TensorSource& s, int configured, const std::string& tensor, const char* key);

// GPT-2 and GPT-Neo share these: tensors under "transformer." in HF checkpoints, or at the top.
std::string gpt_prefix(const TensorSource& s);
void bind_learned_embeddings(const TensorSource& s, const std::string& prefix, Model& m);
// ln_1, ln_2 and the GELU MLP of one block; conv: HF Conv1D layout, else nn.Linear.
void bind_gpt_norms_and_mlp(const TensorSource& s, const std::string& layer_prefix, const ModelConfig& c,
                            LayerWeights& L, bool conv);

}  // namespace kvlm
