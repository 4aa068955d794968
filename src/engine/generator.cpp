#include "engine/generator.h"

#include <chrono>
#include <numeric>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/sink_cache.h"
#include "model/forward.h"

namespace kvlm {

const char* finish_reason_name(FinishReason r) { return r == FinishReason::Eos ? "stop" : "length"; }

const char* stopped_by_name(FinishReason r) {
  return r == FinishReason::Eos ? "eos" : r == FinishReason::Context ? "context" : "max_new_tokens";
}

double GenerateResult::tpot_ms() const {
  return step_ms.empty() ? 0.0 : std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / step_ms.size();
}

namespace {
GenerateResult& finish_run(GenerateResult& r, const KvCache& cache, const GenerateOptions& opt) {
  r.kv_cache_bytes = opt.use_kv_cache ? cache.bytes_allocated() : 0;
  return r;
}
}  // namespace

GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt,
                        const std::function<void(int)>& on_token) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& c = m.cfg;
  const bool sinks = opt.window > 0;
  const int ctx = sinks ? (1 << 30) : opt.context > 0 ? opt.context : c.max_seq_len;
  if (prompt.empty()) fail("prompt is empty: it needs at least one token (BOS)");
  if (opt.max_new_tokens < 0) fail("max-new-tokens must be >= 0");
  if (static_cast<int>(prompt.size()) > (sinks ? opt.window : ctx))
    fail("prompt of ", prompt.size(), " tokens is longer than the ", sinks ? "window" : "context", " of ",
         sinks ? opt.window : ctx, " tokens");
  const int total = static_cast<int>(std::min<long>(ctx, static_cast<long>(prompt.size()) + opt.max_new_tokens));

  GenerateResult r;
  Sampler sampler(opt.sampling);
  std::vector<int> seq = prompt;
  std::vector<float> logits;
  // With the cache on, one cache lives for the whole run. With it off, every step starts an
  // empty one and recomputes all positions: same forward, no reuse, nothing kept.
  std::unique_ptr<KvCache> owned;
  if (sinks && opt.use_kv_cache)
    owned = std::make_unique<SinkKvCache>(m, opt.sink_tokens, opt.window);
  else
    owned = std::make_unique<ContiguousKvCache>(c, opt.use_kv_cache ? total : 1, opt.kv_dtype, opt.kv_residual);
  KvCache& cache = *owned;  // grows as positions arrive: sized by need, not by the context limit
  auto t0 = clock::now();
  while (static_cast<int>(seq.size()) < total) {
    auto ts = clock::now();
    if (opt.use_kv_cache) {
      // Tokens the cache has not seen: all of the prompt first, then the last sampled one.
      int todo = r.generated.empty() ? static_cast<int>(seq.size()) : 1;
      forward(m, cache, seq.data() + seq.size() - todo, todo, LogitsFor::Last, logits);
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
    if (opt.stop_at_eos && (next == c.eos_id || next == c.bos_id)) {
      r.finish = FinishReason::Eos;
      return finish_run(r, cache, opt);
    }
  }
  r.finish = static_cast<int>(r.generated.size()) >= opt.max_new_tokens ? FinishReason::MaxTokens : FinishReason::Context;
  return finish_run(r, cache, opt);
}

}  // namespace kvlm
