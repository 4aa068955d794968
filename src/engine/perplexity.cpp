#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"

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

KvQualityResult kv_quality(const Model& m, const std::vector<int>& ids, int window, DType dtype, int residual) {
  if (window < 2) fail("perplexity window must be at least 2 tokens, got ", window);
  if (window > m.cfg.max_seq_len) fail("window ", window, " exceeds the model's context ", m.cfg.max_seq_len);
  KvQualityResult r;
  const int V = m.cfg.vocab_size;
  std::vector<double> klds;
  std::vector<float> lf, lq;
  long same = 0;
  for (size_t start = 0; start + 1 < ids.size(); start += window) {
    int len = static_cast<int>(std::min<size_t>(window, ids.size() - start));
    if (len < 2) break;
    ContiguousKvCache cf(m.cfg, len), cq(m.cfg, len, dtype, residual);
    r.kv_bytes_f32 = cf.bytes_for(len);  // what each holds for the whole window
    r.kv_bytes = cq.bytes_for(len);
    double nf = 0, nq = 0;
    for (int t = 0; t + 1 < len; ++t) {
      const int tok = ids[start + t], next = ids[start + t + 1];
      forward(m, cf, &tok, 1, LogitsFor::Last, lf);
      forward(m, cq, &tok, 1, LogitsFor::Last, lq);
      nf += token_nll(lf.data(), V, next);
      nq += token_nll(lq.data(), V, next);
      // KL(p || q) from log-softmaxes in double.
      double mf = lf[0], mq = lq[0];
      for (int i = 1; i < V; ++i) {
        mf = std::max(mf, double(lf[i]));
        mq = std::max(mq, double(lq[i]));
      }
      double zf = 0, zq = 0;
      for (int i = 0; i < V; ++i) {
        zf += std::exp(lf[i] - mf);
        zq += std::exp(lq[i] - mq);
      }
      double lzf = std::log(zf) + mf, lzq = std::log(zq) + mq, kl = 0;
      int af = 0, aq = 0;
      for (int i = 0; i < V; ++i) {
        double lpf = lf[i] - lzf, lpq = lq[i] - lzq;
        kl += std::exp(lpf) * (lpf - lpq);
        if (lf[i] > lf[af]) af = i;
        if (lq[i] > lq[aq]) aq = i;
      }
      klds.push_back(std::max(0.0, kl));
      same += af == aq;
    }
    r.f32.window_nll.push_back(nf);
    r.quantized.window_nll.push_back(nq);
    r.f32.total_nll += nf;
    r.quantized.total_nll += nq;
    r.f32.scored_tokens += len - 1;
    r.quantized.scored_tokens += len - 1;
  }
  if (klds.empty()) fail("text is too short for perplexity: it needs at least 2 tokens");
  for (PerplexityResult* p : {&r.f32, &r.quantized}) {
    p->mean_nll = p->total_nll / p->scored_tokens;
    p->perplexity = std::exp(p->mean_nll);
  }
  r.ppl_change_pct = 100.0 * (r.quantized.perplexity / r.f32.perplexity - 1.0);
  double sum = 0;
  for (double k : klds) sum += k;
  r.kld_mean = sum / klds.size();
  std::vector<double> sorted = klds;
  std::sort(sorted.begin(), sorted.end());
  r.kld_p99 = sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * sorted.size()))];
  r.top1_same = static_cast<double>(same) / klds.size();
  return r;
}

}  // namespace kvlm
