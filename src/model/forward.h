// The one forward pass: prefill (many tokens) and decode (one token) are the same call.
#pragma once
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace kvlm {

enum class LogitsFor { All, Last };

// Runs tokens[0..n) at positions kv.length() .. kv.length()+n-1, stores their K/V in `kv`
// and advances it. logits receives [n][vocab] (All) or [1][vocab] (Last).
void forward(const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which, std::vector<float>& logits);

}  // namespace kvlm
