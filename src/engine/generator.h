// Single-sequence generation: prefill the prompt, then decode token by token, with the KV
// cache on, or off (every step recomputes the whole sequence, like HF use_cache=False).
#pragma once
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "kv/kv_quant.h"
#include "model/model.h"

namespace kvlm {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  bool use_kv_cache = true;
  bool stop_at_eos = true;  // stop at EOS (and BOS, which starts a new document)
  int context = 0;          // 0 = the model's max_seq_len
  KvDtype kv_dtype = KvDtype::F32;
  int kv_residual = 128;    // newest positions kept f32 when kv_dtype is quantized
  int sink_tokens = 0;      // with window > 0: StreamingLLM, keep sink_tokens + the last window
  int window = 0;
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

// on_token(id) is called as each token is produced (for streaming).
GenerateResult generate(const Model& m, const std::vector<int>& prompt, const GenerateOptions& opt,
                        const std::function<void(int)>& on_token = nullptr);

}  // namespace kvlm
