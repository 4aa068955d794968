// Perplexity over non-overlapping windows, each evaluated from an empty KV cache:
// a window of L tokens contributes L-1 predictions (its first token is context only).
#pragma once
#include <vector>

#include "kernels/kv_quant.h"
#include "model/model.h"

namespace kvlm {

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;           // nats
  double total_nll = 0;
  long scored_tokens = 0;
  std::vector<double> window_nll;  // per window, summed
};

PerplexityResult perplexity(const Model& m, const std::vector<int>& ids, int window);

// A quantized KV cache against an f32 one: both decode the windows token by token, so every
// prediction attends to cached (encoded) keys and values, and the two distributions compare.
struct KvQualityResult {
  PerplexityResult f32, quantized;
  double ppl_change_pct = 0;   // (quantized / f32 - 1) x 100
  double kld_mean = 0, kld_p99 = 0;  // KL(p_f32 || p_quantized) per position, nats
  double top1_same = 0;        // fraction of positions whose argmax is unchanged
  size_t kv_bytes_f32 = 0, kv_bytes = 0;  // cache bytes for one window
};
KvQualityResult kv_quality(const Model& m, const std::vector<int>& ids, int window, DType dtype, int residual);

// log-softmax(logits)[target], in double.
double token_nll(const float* logits, int vocab, int target);

}  // namespace kvlm
