// Token sampling: greedy (argmax, lowest id on ties), or temperature with top-k / top-p, seeded.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace kvlm {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = all
  float top_p = 1.0f;        // 1 = all
  uint64_t seed = 0;
  // Ids at or above this are never produced (0 = the whole vocabulary): set to the tokenizer's
  // size when the model's embedding has padding rows the tokenizer cannot decode.
  int vocab_limit = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Throws KvlmError when any logit is NaN or infinite: a broken model is an error, not a
  // stream of token 0.
  int sample(const float* logits, int vocab);
  static int argmax(const float* logits, int vocab);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> cand_;  // scratch
};

}  // namespace kvlm
