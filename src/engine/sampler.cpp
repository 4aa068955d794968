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

int Sampler::sample(const float* logits, int vocab) {
  check_finite(logits, vocab);
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
