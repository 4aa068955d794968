// kvlm ppl: perplexity of a text file over non-overlapping windows.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/perplexity.h"

namespace kvlm::cli {

namespace {
struct PplArgs : ModelArgs, KvCodecArgs {
  std::string text;
  int ctx = 0;
  long max_tokens = 0;
  bool json = false;
};

int run_ppl(const PplArgs& a) {
  check_kv_dtype_name(a.kv_dtype);  // before the (slow) model load
  auto model = load_model(a.model, a.weights);
  auto tok = load_tokenizer_for(a.model, a.tokenizer, *model);
  std::vector<int> ids = tok->encode_prompt(read_file(a.text));
  if (a.max_tokens > 0 && static_cast<long>(ids.size()) > a.max_tokens) ids.resize(a.max_tokens);
  int window = a.ctx > 0 ? a.ctx : model->cfg.max_seq_len;
  // Perplexity itself is windowed prefill, which attends in f32 whatever the KV type: the
  // token-by-token comparison runs only for a KV type named, never for auto.
  const DType dtype = a.kv_dtype == "auto" ? DType::F32 : kv_dtype_for(a.kv_dtype, *model);
  if (dtype != DType::F32) {  // decode token by token through both caches and compare
    KvQualityResult q = kv_quality(*model, ids, window, dtype, a.kv_residual);
    nlohmann::json j{{"kv_dtype", dtype_name(dtype)},
                     {"kv_residual", a.kv_residual},
                     {"perplexity", q.quantized.perplexity},
                     {"perplexity_f32_cache", q.f32.perplexity},
                     {"perplexity_change_pct", q.ppl_change_pct},
                     {"kld_mean", q.kld_mean},
                     {"kld_p99", q.kld_p99},
                     {"top1_unchanged", q.top1_same},
                     {"scored_tokens", q.quantized.scored_tokens},
                     {"kv_bytes_per_window", q.kv_bytes},
                     {"kv_bytes_per_window_f32", q.kv_bytes_f32},
                     {"ctx", window}};
    if (a.json) {
      std::puts(j.dump().c_str());
    } else {
      std::printf("perplexity %.6f with %s KV (residual %d) vs %.6f with f32 KV: %+.3f%%\n", q.quantized.perplexity,
                  dtype_name(dtype), a.kv_residual, q.f32.perplexity, q.ppl_change_pct);
      std::printf("KL divergence vs f32: mean %.3g, p99 %.3g nats | top-1 unchanged %.2f%% | KV %zu vs %zu bytes per window\n",
                  q.kld_mean, q.kld_p99, 100 * q.top1_same, q.kv_bytes, q.kv_bytes_f32);
    }
    return 0;
  }
  PerplexityResult r = perplexity(*model, ids, window);
  if (a.json) {
    nlohmann::json j{{"perplexity", r.perplexity}, {"mean_nll", r.mean_nll}, {"total_nll", r.total_nll},
                     {"scored_tokens", r.scored_tokens}, {"windows", r.window_nll.size()}, {"ctx", window},
                     {"tokens", ids.size()}};
    std::puts(j.dump().c_str());
  } else {
    std::printf("perplexity %.6f  (mean NLL %.8f nats, %ld tokens scored, %zu windows of %d)\n", r.perplexity,
                r.mean_nll, r.scored_tokens, r.window_nll.size(), window);
  }
  return 0;
}
}  // namespace

Runner add_ppl(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* sub = app.add_subcommand("ppl", "perplexity over non-overlapping windows; with --kv-dtype naming a type other than f32 it decodes token by token and reports the change against f32 (KLD, top-1)");
  add_model_options(sub, *a, kModelRequired | kModelTokenizer);
  sub->add_option("--text", a->text, "text file")->required();
  sub->add_option("--ctx", a->ctx, "window length (default: the model's context)")->check(CLI::Range(2, 1 << 24));
  sub->add_option("--max-tokens", a->max_tokens, "score only the first N tokens (BOS included)")
      ->check(CLI::Range(0, 1 << 24));
  add_kv_codec_options(sub, *a);
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_ppl(*a); };
}

}  // namespace kvlm::cli
