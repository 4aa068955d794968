#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvlm {

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) fail("temperature must be >= 0, got ", p.temperature);
  if (p.top_k < 0) fail("top-k must be >= 0, got ", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top-p must be in (0, 1], got ", p.top_p);
  if (p.vocab_limit < 0) fail("vocabulary limit must be >= 0, got ", p.vocab_limit);
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) fail("logit bias ", bias, " for token ", id, " is outside [-100, 100]");
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) fail("repetition penalty must be in (0, 2], got ", p.repetition_penalty);
  for (float x : {p.frequency_penalty, p.presence_penalty})
    if (!(x >= -2.0f && x <= 2.0f)) fail("frequency and presence penalties must be in [-2, 2], got ", x);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("min-p must be in [0, 1], got ", p.min_p);
}

namespace {
void check_finite(const float* logits, int vocab) {
  for (int i = 0; i < vocab; ++i)
    if (!std::isfinite(logits[i]))
      fail("the model produced a non-finite logit (", logits[i], " for token ", i,
           "); its weights or config (RoPE, norms) are broken");
}
}  // namespace

int Sampler::argmax(const float* logits, int vocab) {
  check_finite(logits, vocab);
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

const float* Sampler::adjust(const float* logits, int vocab, const int* history, int n_history, int prompt_len) {
  const bool penalties = p_.repetition_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f;
  if (p_.logit_bias.empty() && !penalties) return logits;
  adjusted_.assign(logits, logits + vocab);
  for (const auto& [id, bias] : p_.logit_bias)
    if (id < vocab) adjusted_[id] += bias;
  if (!penalties || n_history == 0) return adjusted_.data();
  if (counts_.size() < static_cast<size_t>(vocab)) counts_.resize(vocab, 0);
  for (int i = 0; i < n_history; ++i) {
    const int t = history[i];
    if (t < 0 || t >= vocab) continue;
    if (i >= prompt_len) counts_[t] = std::max(counts_[t], 0) + 1;
    else if (counts_[t] == 0) counts_[t] = -1;
  }
  // Each token seen once, walking the history again (not the vocabulary, every step), and its
  // count cleared as it is used so that counts_ is all zero for the next step.
  for (int i = 0; i < n_history; ++i) {
    const int t = history[i];
    if (t < 0 || t >= vocab || counts_[t] == 0) continue;
    float& l = adjusted_[t];
    if (p_.repetition_penalty != 1.0f) l = l > 0.0f ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    if (counts_[t] > 0) l -= static_cast<float>(counts_[t]) * p_.frequency_penalty + p_.presence_penalty;
    counts_[t] = 0;
  }
  return adjusted_.data();
}

int Sampler::sample(const float* raw, int vocab, const int* history, int n_history, int prompt_len) {
  check_finite(raw, vocab);
  const float* logits = adjust(raw, vocab, history, n_history, prompt_len);
  if (p_.vocab_limit > 0) vocab = std::min(vocab, p_.vocab_limit);
  if (p_.temperature == 0.0f) return argmax(logits, vocab);
  cand_.resize(vocab);
  for (int i = 0; i < vocab; ++i) cand_[i] = {logits[i] / p_.temperature, i};
  auto by_logit = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  float mx = cand_[0].first;
  double sum = 0.0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  if (p_.min_p > 0.0f) {  // cand_ is sorted: the first is the most likely, weight 1
    size_t n = 1;
    while (n < cand_.size() && cand_[n].first >= p_.min_p) ++n;
    cand_.resize(n);
    sum = 0.0;
    for (auto& c : cand_) sum += c.first;
  }
  if (p_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
    double acc = 0.0;
    size_t n = 0;
    while (n < cand_.size()) {
      acc += cand_[n++].first / sum;
      if (acc >= p_.top_p) break;
    }
    cand_.resize(n);
    sum = 0.0;
    for (auto& c : cand_) sum += c.first;
  }
  double r = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  for (auto& c : cand_) {
    r -= c.first;
    if (r <= 0.0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace kvlm
