// kvlm batch: many prompts (one per line) through the batched engine over the paged cache.
// Reports aggregate tokens/s and the prefix-cache hit rate.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/engine.h"

namespace kvlm::cli {

namespace {

struct BatchArgs : ModelArgs, KvCodecArgs, KvPoolArgs, SamplingArgs, SinkArgs, KvTierArgs {
  std::string prompts;
  int max_new_tokens = 64, max_batch_tokens = 4096;
  bool json = false, no_prefix_cache = false, ignore_eos = false, kv_stats = false;
};

int run_batch(const BatchArgs& a) {
  check_kv_dtype_name(a.kv_dtype);  // before the (slow) model load
  auto model = load_model(a.model, a.weights);
  auto tok = load_tokenizer_for(a.model, a.tokenizer, *model);
  std::vector<std::string> lines;
  {
    std::istringstream in(read_file(a.prompts, size_t{64} << 20));  // 64 MB of prompts at most
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) fail(a.prompts, ": no prompts (one per line)");
  EngineOptions eo;
  eo.block_size = a.block_size;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.max_batch_tokens = a.max_batch_tokens;
  eo.kv_dtype = kv_dtype_for(a.kv_dtype, *model, a.window > 0);
  eo.kv_residual = a.kv_residual;
  eo.sink_tokens = a.sink_tokens;
  eo.window = a.window;
  eo.tiers = kv_tier_options(a);
  // Default pool: room for every sequence at its full length, which the context caps.
  const size_t ctx = static_cast<size_t>(model->cfg.max_seq_len);
  size_t need = 0;
  std::vector<std::vector<int>> prompts;
  for (const std::string& l : lines) {
    prompts.push_back(tok->encode_prompt(l));
    size_t len = a.window > 0 ? static_cast<size_t>(a.sink_tokens) + a.window  // a stream's footprint
                              : std::min(ctx, prompts.back().size() + static_cast<size_t>(a.max_new_tokens));
    need += (len + a.block_size - 1) / a.block_size;
  }
  eo.num_blocks = a.kv_blocks > 0 ? a.kv_blocks : static_cast<int>(std::min<size_t>(need, 1 << 24));
  if (!a.kv_capacity.empty())
    eo.num_blocks = parse_kv_capacity(a.kv_capacity, KvPages::block_bytes(model->cfg, a.block_size, eo.kv_dtype), a.block_size);
  Engine e(*model, eo);
  std::vector<int> ids;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i)
    ids.push_back(e.add({prompts[i], a.max_new_tokens, {a.temperature, a.top_k, a.top_p, a.seed + i, tok->vocab_size()},
                         !a.ignore_eos, ""}));
  size_t peak_blocks = 0;
  while (e.has_work()) {
    e.step();
    peak_blocks = std::max<size_t>(peak_blocks, e.pool().num_blocks() - e.pool().num_free());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats& st = e.stats();
  nlohmann::json out = nlohmann::json::array();
  long generated = 0, failed = 0;
  double ttft = 0;  // summed over the sequences that produced a token (a failed one has none)
  for (size_t i = 0; i < ids.size(); ++i) {
    const Sequence& s = e.seq(ids[i]);
    std::vector<int> gen(s.tokens.begin() + s.prompt_len, s.tokens.end());
    generated += static_cast<long>(gen.size());
    failed += s.state == SeqState::Failed;
    if (s.state != SeqState::Failed && s.ttft_ms >= 0) ttft += s.ttft_ms;
    out.push_back({{"prompt", lines[i]}, {"generated_ids", gen}, {"text", tok->decode_all(gen, s.tokens[s.prompt_len - 1])},
                   {"ttft_ms", s.ttft_ms}, {"reused_prompt_tokens", s.reused_tokens},
                   {"state", s.state == SeqState::Failed ? "failed: " + s.error : "finished"}});
  }
  nlohmann::json j{{"sequences", ids.size()},
                   {"failed", failed},
                   {"generated_tokens", generated},
                   {"prompt_tokens", st.prompt_tokens},
                   {"seconds", secs},
                   {"tokens_per_s", generated / secs},
                   {"steps", st.steps},
                   {"prefix_cache_hit_rate", st.prefix_hit_rate()},
                   {"reused_prompt_tokens", st.reused_tokens},
                   {"preemptions", st.preemptions},
                   {"mean_ttft_ms", ids.size() > static_cast<size_t>(failed) ? ttft / (ids.size() - failed) : 0.0},
                   {"peak_kv_bytes", peak_blocks * e.pool().bytes_per_block()},
                   {"kv_pool_bytes", static_cast<size_t>(e.pool().num_blocks()) * e.pool().bytes_per_block()},
                   {"kv_dtype", dtype_name(eo.kv_dtype)},
                   {"results", out}};
  if (a.json) {
    std::puts(j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const Sequence& s = e.seq(ids[i]);
    if (s.state == SeqState::Failed)
      std::printf("[%zu] FAILED: %s\n", i, s.error.c_str());
    else
      std::printf("[%zu] %s%s\n", i, lines[i].c_str(), out[i]["text"].get<std::string>().c_str());
  }
  std::printf("\n%zu sequences (%ld failed), %ld tokens generated in %.3f s = %.1f tokens/s aggregate, %ld steps\n",
              ids.size(), failed, generated, secs, generated / secs, st.steps);
  std::printf("prefix cache: %.1f%% of %ld prompt tokens reused | preemptions %ld | mean TTFT %.2f ms | peak KV %.3f MB\n",
              100 * st.prefix_hit_rate(), st.prompt_tokens, st.preemptions,
              ids.size() > static_cast<size_t>(failed) ? ttft / (ids.size() - failed) : 0.0,
              peak_blocks * e.pool().bytes_per_block() / 1e6);
  if (a.kv_stats) std::fputs(e.ledger().to_text().c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_batch(CLI::App& app) {
  auto a = std::make_shared<BatchArgs>();
  CLI::App* sub = app.add_subcommand("batch", "run many prompts through the batched engine");
  add_model_options(sub, *a, kModelRequired | kModelTokenizer);
  sub->add_option("--prompts", a->prompts, "text file, one prompt per line")->required();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens per prompt (default 64)")->check(CLI::Range(1, 1 << 24));
  add_kv_pool_options(sub, *a);
  add_sink_options(sub, *a);
  add_kv_tier_options(sub, *a);
  add_kv_codec_options(sub, *a);
  sub->add_option("--max-batch-tokens", a->max_batch_tokens, "tokens computed per step (default 4096)")
      ->check(CLI::Range(1, 1 << 24));
  add_sampling_options(sub, *a, "sampling seed (prompt i uses seed + i)");
  sub->add_flag("--no-prefix-cache", a->no_prefix_cache, "compute every prompt in full");
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past EOS/BOS");
  sub->add_flag("--kv-stats", a->kv_stats, "print the KV ledger at the end");
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_batch(*a); };
}

}  // namespace kvlm::cli
