// RopeTable: a config's rotary embedding, computed once: the inverse frequency of each pair
// (theta, then linear / Llama 3 scaling and GGUF's rope_freqs divisors) and the rotation itself.
// The KV caches that re-rotate keys (attention sinks) take this, not the whole model.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace kvlm {

struct RopeTable {
  RopeKind kind = RopeKind::None;
  int head_dim = 0;
  int rot_dims = 0;             // the first rot_dims values of each head rotate (partial rotary)
  std::vector<float> inv_freq;  // [rot_dims/2]

  static RopeTable for_config(const ModelConfig& c);
  // The table as the rotation kernels read it.
  RopeSpec spec() const { return RopeSpec{kind == RopeKind::AdjacentPairs, inv_freq.data(), head_dim, rot_dims}; }
  // Rotates n_heads consecutive head vectors of one position (angles computed once); no-op
  // without RoPE. A negative pos rotates back.
  void rotate_heads(float* heads, int n_heads, int pos) const;
};

}  // namespace kvlm
