#include "engine/perplexity.h"

#include <cmath>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace kvlm {

double token_nll(const float* logits, int vocab, int target) {
  double mx = logits[0];
  for (int i = 1; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return -(static_cast<double>(logits[target]) - mx - std::log(sum));
}

PerplexityResult perplexity(const Model& m, const std::vector<int>& ids, int window) {
  if (window < 2) fail("perplexity window must be at least 2 tokens, got ", window);
  if (window > m.cfg.max_seq_len) fail("window ", window, " exceeds the model's context ", m.cfg.max_seq_len);
  PerplexityResult r;
  std::vector<float> logits;
  const int V = m.cfg.vocab_size;
  for (size_t start = 0; start + 1 < ids.size(); start += window) {
    int len = static_cast<int>(std::min<size_t>(window, ids.size() - start));
    if (len < 2) break;
    ContiguousKvCache cache(m.cfg, len);
    forward(m, cache, ids.data() + start, len, LogitsFor::All, logits);
    double nll = 0.0;
    for (int t = 0; t + 1 < len; ++t) nll += token_nll(logits.data() + static_cast<size_t>(t) * V, V, ids[start + t + 1]);
    r.window_nll.push_back(nll);
    r.total_nll += nll;
    r.scored_tokens += len - 1;
  }
  if (r.scored_tokens == 0) fail("text is too short for perplexity: it needs at least 2 tokens");
  r.mean_nll = r.total_nll / r.scored_tokens;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace kvlm
