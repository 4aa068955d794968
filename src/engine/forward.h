// The one forward pass: prefill (many tokens) and decode (one token) are the same call, and
// several sequences run together in one batch, so each weight is read once per step.
#pragma once
#include <vector>

#include "kernels/context.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace kvlm {

enum class LogitsFor { All, Last };

// One sequence's part of a batch: tokens[0..n) at positions kv->length() .. +n-1.
struct SeqChunk {
  KvCache* kv;
  const int* tokens;
  int n;
  LogitsFor which;
};

// Runs every chunk, stores their K/V in their caches and advances them. logits receives, chunk
// after chunk, [n][vocab] rows (All) or one [vocab] row (Last). Runs on ctx (its pool, ISA and
// activation scratch); the forms without a context use this thread's default one.
void forward_batch(Context& ctx, const Model& m, const std::vector<SeqChunk>& chunks, std::vector<float>& logits);
void forward_batch(const Model& m, const std::vector<SeqChunk>& chunks, std::vector<float>& logits);

// A batch of one.
void forward(Context& ctx, const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which,
             std::vector<float>& logits);
void forward(const Model& m, KvCache& kv, const int* tokens, int n, LogitsFor which, std::vector<float>& logits);

}  // namespace kvlm
