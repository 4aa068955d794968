#include "engine/generator.h"

#include <chrono>
#include <numeric>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/forward.h"

namespace kvlm {

double GenerateResult::tpot_ms() const {
  return step_ms.empty() ? 0.0 : std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / step_ms.size();
}

GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt,
                        const std::function<void(int)>& on_token) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = m.cfg;
  const int ctx = opt.context > 0 ? opt.context : c.max_seq_len;
  if (prompt.empty()) fail("prompt is empty: it needs at least one token (BOS)");
  if (opt.max_new_tokens < 0) fail("max-new-tokens must be >= 0");
  if (static_cast<int>(prompt.size()) > ctx)
    fail("prompt of ", prompt.size(), " tokens is longer than the context of ", ctx, " tokens");
  const int total = std::min<int>(ctx, static_cast<int>(prompt.size()) + opt.max_new_tokens);

  GenerateResult r;
  Sampler sampler(opt.sampling);
  std::vector<int> seq = prompt;
  std::vector<float> logits;
  // With the cache on, one cache lives for the whole run. With it off, every step starts an
  // empty one and recomputes all positions: same forward, no reuse, nothing kept.
  ContiguousKvCache cache(c, opt.use_kv_cache ? ctx : 1, opt.kv_dtype, opt.kv_residual);
  r.kv_cache_bytes = opt.use_kv_cache ? cache.bytes_allocated() : 0;
  auto t0 = clock::now();
  while (static_cast<int>(seq.size()) < total) {
    auto ts = clock::now();
    if (opt.use_kv_cache) {
      int done = cache.length();
      forward(m, cache, seq.data() + done, static_cast<int>(seq.size()) - done, LogitsFor::Last, logits);
    } else {
      ContiguousKvCache scratch(c, static_cast<int>(seq.size()));
      forward(m, scratch, seq.data(), static_cast<int>(seq.size()), LogitsFor::Last, logits);
    }
    int next = sampler.sample(logits.data(), c.vocab_size);
    auto te = clock::now();
    double ms = std::chrono::duration<double, std::milli>(te - ts).count();
    if (r.generated.empty())
      r.ttft_ms = std::chrono::duration<double, std::milli>(te - t0).count();
    else
      r.step_ms.push_back(ms);
    seq.push_back(next);
    r.generated.push_back(next);
    if (on_token) on_token(next);
    if (opt.stop_at_eos && (next == c.eos_id || next == c.bos_id)) break;
  }
  return r;
}

}  // namespace kvlm
