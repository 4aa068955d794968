#include "engine/generator.h"

#include <chrono>
#include <numeric>

#include "core/error.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "kv/sink_cache.h"

namespace kvlm {

const char* finish_reason_name(FinishReason r) { return r == FinishReason::Eos ? "stop" : "length"; }

const char* stopped_by_name(FinishReason r) {
  return r == FinishReason::Eos ? "eos" : r == FinishReason::Context ? "context" : "max_new_tokens";
}

double GenerateResult::tpot_ms() const {
  return step_ms.empty() ? 0.0 : std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / step_ms.size();
}

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Generation::Generation(const Model& m, std::vector<int> prompt, const GenerateOptions& opt)
    : m_(m), opt_(opt), seq_(std::move(prompt)) {
  const ModelConfig& c = m.cfg;
  const bool sinks = opt.window > 0;
  const int ctx = sinks ? (1 << 30) : opt.context > 0 ? opt.context : c.max_seq_len;
  if (seq_.empty()) fail("prompt is empty: it needs at least one token (BOS)");
  if (opt.max_new_tokens < 0) fail("max_new_tokens must be >= 0, got ", opt.max_new_tokens);
  for (int id : seq_)
    if (id < 0 || id >= c.vocab_size) fail("token id ", id, " is outside the vocabulary of ", c.vocab_size);
  if (static_cast<int>(seq_.size()) > (sinks ? opt.window : ctx))
    fail("prompt of ", seq_.size(), " tokens is longer than the ", sinks ? "window" : "context", " of ",
         sinks ? opt.window : ctx, " tokens");
  if (sinks && opt.use_kv_cache && opt.kv_dtype != DType::F32)  // the sink cache moves and re-rotates f32 rows
    fail("attention sinks need f32 KV pages, not ", dtype_name(opt.kv_dtype));
  if (sinks && opt.use_kv_cache && (m.cfg.rope_local_theta > 0 || !m.cfg.layer_rope.empty()))
    fail("attention sinks re-rotate keys with one RoPE for every layer; this model's layers differ in RoPE");
  total_ = static_cast<int>(std::min<long>(ctx, static_cast<long>(seq_.size()) + opt.max_new_tokens));
  sampler_ = std::make_unique<Sampler>(opt.sampling);
  // With the cache on, one cache lives for the whole run. With it off, every step starts an
  // empty one and recomputes all positions: same forward, no reuse, nothing kept.
  if (sinks && opt.use_kv_cache)
    cache_ = std::make_unique<SinkKvCache>(m.cfg, m.rope, opt.sink_tokens, opt.window);
  else  // grows as positions arrive: sized by need, not by the context limit
    cache_ = std::make_unique<ContiguousKvCache>(c, opt.use_kv_cache ? total_ : 1, opt.kv_dtype, opt.kv_residual);
  done_ = static_cast<int>(seq_.size()) >= total_;
  if (done_) r_.finish = opt.max_new_tokens == 0 ? FinishReason::MaxTokens : FinishReason::Context;
}

Generation::~Generation() = default;

bool Generation::next(int& token) {
  if (done_) return false;
  const ModelConfig& c = m_.cfg;
  const double ts = now_ms();
  if (r_.generated.empty()) t0_ms_ = ts;  // TTFT: from the prompt going in, however late next() is first called
  if (opt_.use_kv_cache) {
    // Tokens the cache has not seen: all of the prompt first, then the last sampled one.
    int todo = r_.generated.empty() ? static_cast<int>(seq_.size()) : 1;
    forward(ctx(), m_, *cache_, seq_.data() + seq_.size() - todo, todo, LogitsFor::Last, logits_);
  } else {
    ContiguousKvCache scratch(c, static_cast<int>(seq_.size()));
    forward(ctx(), m_, scratch, seq_.data(), static_cast<int>(seq_.size()), LogitsFor::Last, logits_);
  }
  token = sampler_->sample(logits_.data(), c.vocab_size);
  const double te = now_ms();
  if (r_.generated.empty())
    r_.ttft_ms = te - t0_ms_;
  else
    r_.step_ms.push_back(te - ts);
  seq_.push_back(token);
  r_.generated.push_back(token);
  r_.kv_cache_bytes = opt_.use_kv_cache ? cache_->bytes_allocated() : 0;
  if (opt_.stop_at_eos && (token == c.eos_id || token == c.bos_id)) {
    r_.finish = FinishReason::Eos;
    done_ = true;
  } else if (static_cast<int>(seq_.size()) >= total_) {
    r_.finish = static_cast<int>(r_.generated.size()) >= opt_.max_new_tokens ? FinishReason::MaxTokens
                                                                              : FinishReason::Context;
    done_ = true;
  }
  return true;
}

GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt,
                        const std::function<void(int)>& on_token) {
  Generation g(m, prompt, opt);
  int token;
  while (g.next(token))
    if (on_token) on_token(token);
  return g.result();
}

}  // namespace kvlm
