// Token sampling: greedy (argmax, lowest id on ties), or temperature with top-k / top-p, seeded.
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kvlm {

struct SamplingParams {
  // The common five in order (the callers' brace lists); the adjustments below are set by name.
  SamplingParams(float temperature_ = 0.0f, int top_k_ = 0, float top_p_ = 1.0f, uint64_t seed_ = 0, int vocab_limit_ = 0)
      : temperature(temperature_), top_k(top_k_), top_p(top_p_), seed(seed_), vocab_limit(vocab_limit_) {}
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = all
  float top_p = 1.0f;        // 1 = all
  uint64_t seed = 0;
  // Ids at or above this are never produced (0 = the whole vocabulary): set to the tokenizer's
  // size when the model's embedding has padding rows the tokenizer cannot decode.
  int vocab_limit = 0;
  // Before the temperature, in vLLM's order: each listed token's bias added (OpenAI's logit_bias:
  // -100 bans a token, +100 all but forces it), then the penalties over the tokens so far:
  // repetition (Hugging Face's, over prompt and output: a seen token's logit divided by it where
  // positive, multiplied where not), frequency and presence (OpenAI's, over the output: minus
  // frequency per occurrence, minus presence once). After the temperature, min_p keeps the tokens
  // whose probability is at least min_p times the most likely one's.
  std::vector<std::pair<int, float>> logit_bias;
  float repetition_penalty = 1.0f, frequency_penalty = 0.0f, presence_penalty = 0.0f;
  float min_p = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Throws KvlmError when any logit is NaN or infinite: a broken model is an error, not a
  // stream of token 0.
  // history: the sequence's tokens so far (its first prompt_len the prompt), for the penalties.
  int sample(const float* logits, int vocab, const int* history = nullptr, int n_history = 0, int prompt_len = 0);
  static int argmax(const float* logits, int vocab);

 private:
  // logits with the bias and penalties applied (into adjusted_), or logits itself where none are set.
  const float* adjust(const float* logits, int vocab, const int* history, int n_history, int prompt_len);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> cand_;  // scratch
  std::vector<float> adjusted_;
  std::vector<int> counts_;  // per token: its occurrences in the output (-1: in the prompt only); zero between steps
};

}  // namespace kvlm
