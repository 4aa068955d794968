// Single-sequence generation: prefill the prompt, then decode token by token, with the KV
// cache on, or off (every step recomputes the whole sequence, like HF use_cache=False).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "kernels/context.h"
#include "kernels/kv_quant.h"
#include "model/model.h"

namespace kvlm {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  bool use_kv_cache = true;
  bool stop_at_eos = true;  // stop at EOS (and BOS, which starts a new document)
  int context = 0;          // 0 = the model's max_seq_len
  DType kv_dtype = DType::F32;
  int kv_residual = 128;    // newest positions kept f32 when kv_dtype is quantized
  int sink_tokens = 0;      // with window > 0: StreamingLLM, keep sink_tokens + the last window
  int window = 0;
  Context* exec = nullptr;     // execution context; null = the calling thread's default
};

// Why generation ended. OpenAI's finish_reason is "stop" for Eos and "length" for the other two.
enum class FinishReason { Eos, MaxTokens, Context };
const char* finish_reason_name(FinishReason r);  // "stop" | "length"
const char* stopped_by_name(FinishReason r);     // "eos" | "max_new_tokens" | "context"

struct GenerateResult {
  std::vector<int> generated;
  double ttft_ms = 0;            // prompt in -> first token out
  std::vector<double> step_ms;   // each later token
  size_t kv_cache_bytes = 0;     // held by the cache for the run (0 with the cache off)
  FinishReason finish = FinishReason::MaxTokens;
  double tpot_ms() const;        // mean of step_ms
};

class KvCache;

// One generation, a token at a time: next() runs the prefill on its first call, then one decode
// step per call. generate() below drives it to the end; a caller that streams or stops early
// (stop strings, an iterator in Python) drives it itself.
class Generation {
 public:
  Generation(const Model& m, std::vector<int> prompt, const GenerateOptions& opt);  // throws on bad input
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // The next token, or false once generation has ended (why: result().finish).
  bool next(int& token);
  bool done() const { return done_; }
  const GenerateResult& result() const { return r_; }  // so far; complete once done()

 private:
  const Model& m_;
  GenerateOptions opt_;
  std::vector<int> seq_;
  std::vector<float> logits_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<Sampler> sampler_;
  GenerateResult r_;
  int total_ = 0;
  bool done_ = false;
  double t0_ms_ = 0;
  Context& ctx() const { return Context::or_this_thread(opt_.exec); }
};

// on_token(id) is called as each token is produced (for streaming).
GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt,
                        const std::function<void(int)>& on_token = nullptr);

}  // namespace kvlm
