// Helpers the families use to bind named tensors to Model weights (families/*.cpp).
#pragma once
#include <functional>
#include <string>

#include "io/tensor_source.h"
#include "model/model.h"

namespace kvlm {

// nn.Linear [out][in], our layout. GGUF Q8_0 / Q4_0 matrices are packed from their blocks as
// stored: no f32 copy of the model is made for them.
Linear bind_linear(const TensorSource& s, const std::string& name, int out, int in, bool bias);
// The token table in its stored type: f32 borrowed as it is, any other type kept as rows that
// the backend's embed op widens one token at a time.
void bind_token_embedding(const TensorSource& s, const std::string& name, Model& m);
// The LM head: "lm_head", or when the config ties it, the embedding tensor `embedding` (without
// ".weight") in its stored type; an f32 tied table is left to the forward (lm_head stays empty).
void bind_lm_head(const TensorSource& s, const std::string& embedding, Model& m);
// HF Conv1D [in][out] (GPT-2), transposed once at load; always has a bias.
Linear bind_conv1d(const TensorSource& s, const std::string& name, int in, int out);
// Rows [first, first + count) of a fused projection (GPT-2's c_attn holds q, k and v).
Linear split_rows(const Linear& fused, int first, int count);
// Whether a projection has a bias: the config's word when it has one (1 or 0; a bias tensor it
// does not expect is refused, never dropped), else (-1) whether the file holds the tensor.
bool has_bias(const TensorSource& s, int configured, const std::string& tensor, const char* key);

// Where a mixture-of-experts MLP's tensors sit under a layer's prefix: the router, and expert e's
// three matrices at <experts><e>.<gate|up|down>.
struct ExpertNames {
  const char *router, *experts, *gate, *up, *down;
};
// Binds a MoE layer's router and its c.n_experts experts, each matrix in its stored type.
void bind_experts(const TensorSource& s, const std::string& layer_prefix, const ExpertNames& names,
                  const ModelConfig& c, LayerWeights& L);

// A GPT-2-like model: embeddings, positions, the final norm and LM head, and per block ln_1,
// ln_2 and the GELU MLP (conv: HF Conv1D layout, else nn.Linear); `attention(prefix, L)` binds
// the family's attention projections of the block whose tensors start with `prefix`.
void bind_gpt_like(const TensorSource& s, Model& m, bool conv,
                   const std::function<void(const std::string&, LayerWeights&)>& attention);

}  // namespace kvlm
