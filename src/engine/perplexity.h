// Perplexity over non-overlapping windows, each evaluated from an empty KV cache:
// a window of L tokens contributes L-1 predictions (its first token is context only).
#pragma once
#include <vector>

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

// log-softmax(logits)[target], in double.
double token_nll(const float* logits, int vocab, int target);

}  // namespace kvlm
