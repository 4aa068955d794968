// What GPT-Neo shares with GPT-2: the config keys of a LayerNorm / GELU block with learned
// positions, under each family's own key names.
#pragma once
#include "model/family.h"

namespace kvlm {

struct GptKeyNames {
  const char* dim;        // "n_embd" | "hidden_size"
  const char* layers;     // "n_layer" | "num_layers"
  const char* heads;      // "n_head" | "num_heads"
  const char* hidden;     // "n_inner" | "intermediate_size" (default 4 x dim)
  const char* positions;  // "n_positions" | "max_position_embeddings"
};
ModelConfig gpt_like_from_hf(const HfReader& r, const char* arch, const GptKeyNames& keys);
// The GPT-2 block: LayerNorm with bias, q/k/v, attention (the config's scale and windows), GELU.
void forward_gpt(ForwardStep& s, const Model& m);

}  // namespace kvlm
