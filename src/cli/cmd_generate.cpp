// kvlm generate: prompt -> streamed text (or one JSON object). The KV cache is paged by default
// (--kv-layout contiguous for the classic per-sequence buffer) or off (--no-kv-cache).
#include <chrono>
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "kv/kv_snapshot.h"

namespace kvlm::cli {

namespace {

struct GenerateArgs : ModelArgs, KvCodecArgs, KvPoolArgs, SamplingArgs, SinkArgs, KvTierArgs {
  std::string prompt, layout = "paged";
  std::string kv_save, kv_load;  // snapshots of the sequence's KV (paged layout)
  int max_new_tokens = 128, ctx = 0, parallel = 1;
  bool no_kv_cache = false, json = false, ignore_eos = false, kv_stats = false;
};

struct Sample {
  std::vector<int> ids;
  std::string text;
  FinishReason finish;
};

// Why a sequence ended: EOS ("stop"), or a length limit, the token budget or the context.
FinishReason finish_reason(const ModelConfig& c, const GenerateOptions& opt, const std::vector<int>& gen, int total,
                           int context) {
  if (!gen.empty() && opt.stop_at_eos && (gen.back() == c.eos_id || gen.back() == c.bos_id)) return FinishReason::Eos;
  if (static_cast<int>(gen.size()) >= opt.max_new_tokens) return FinishReason::MaxTokens;
  return total >= context ? FinishReason::Context : FinishReason::MaxTokens;
}

struct Outcome {
  std::vector<Sample> samples;
  double ttft_ms = 0, tpot_ms = 0;
  size_t kv_bytes = 0;  // held at the peak
  nlohmann::json ledger;
  std::string ledger_text;
  nlohmann::json snapshot;  // --kv-load / --kv-save: what happened
};

// Contiguous cache, or no cache: the single-sequence loop.
Outcome run_single(const Model& m, const Tokenizer& tok, const std::vector<int>& prompt, const GenerateOptions& opt,
                   bool stream) {
  Outcome o;
  Sample s;
  int prev = prompt.back();
  GenerateResult r = generate(m, prompt, opt, [&](int id) {
    std::string piece = tok.decode(prev, id);
    prev = id;
    s.text += piece;
    if (stream) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  });
  s.ids = r.generated;
  s.finish = r.finish;
  o.samples.push_back(s);
  o.ttft_ms = r.ttft_ms;
  o.tpot_ms = r.tpot_ms();
  o.kv_bytes = r.kv_cache_bytes;
  return o;
}

// Paged cache through the engine; --parallel K forks K continuations off one prefill.
Outcome run_paged(const Model& m, const Tokenizer& tok, const std::vector<int>& prompt, const GenerateArgs& a,
                  const GenerateOptions& opt) {
  EngineOptions eo;
  eo.block_size = a.block_size;
  eo.context = opt.context > 0 ? opt.context : m.cfg.max_seq_len;
  int ctx = a.ctx > 0 ? a.ctx : m.cfg.max_seq_len;
  const int held = a.window > 0 ? a.sink_tokens + a.window  // a stream's footprint
                                : std::min<int>(ctx, static_cast<int>(prompt.size()) + a.max_new_tokens);
  int per_seq = (held + a.block_size - 1) / a.block_size;
  eo.num_blocks = a.kv_blocks > 0 ? a.kv_blocks : per_seq * a.parallel;
  eo.kv_dtype = opt.kv_dtype;
  eo.kv_residual = opt.kv_residual;
  eo.sink_tokens = a.sink_tokens;
  eo.window = a.window;
  eo.tiers = kv_tier_options(a);
  if (!a.kv_capacity.empty())
    eo.num_blocks = parse_kv_capacity(a.kv_capacity, KvPages::block_bytes(m.cfg, a.block_size, opt.kv_dtype), a.block_size);
  Engine e(m, eo);
  int root = e.add({prompt, a.max_new_tokens, opt.sampling, opt.stop_at_eos, "", a.kv_load, a.kv_save});
  std::vector<int> ids = {root};
  const bool stream = !a.json && a.parallel == 1;
  Outcome o;
  std::vector<double> step_ms;
  size_t peak = 0;
  std::map<int, int> prev;
  std::map<int, std::string> text;
  prev[root] = prompt.back();
  bool forked = false;
  while (e.has_work()) {
    auto t0 = std::chrono::steady_clock::now();
    auto events = e.step();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!forked) {
      o.ttft_ms = e.seq(root).ttft_ms;
      forked = true;
      if (e.seq(root).state != SeqState::Failed && e.seq(root).generated() == 1)
        for (int k = 1; k < a.parallel; ++k) {
          int c = e.fork(root, a.seed + k);
          ids.push_back(c);
          prev[c] = prompt.back();
          events.push_back({c, e.seq(c).tokens.back(), e.seq(c).done()});
        }
    } else {
      step_ms.push_back(ms);
    }
    size_t held = static_cast<size_t>(e.pool().num_blocks() - e.pool().num_free()) * e.pool().bytes_per_block();
    if (held >= peak && e.has_work()) {
      peak = held;
      if (a.kv_stats) {
        KvLedger L = e.ledger();
        o.ledger = L.to_json();
        o.ledger_text = L.to_text();
      }
    }
    for (const StepEvent& ev : events) {
      if (ev.token < 0) fail(e.seq(ev.seq).error);
      std::string piece = tok.decode(prev[ev.seq], ev.token);
      prev[ev.seq] = ev.token;
      text[ev.seq] += piece;
      if (stream) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
  }
  for (int id : ids) {
    const Sequence& s = e.seq(id);
    std::vector<int> gen(s.tokens.begin() + s.prompt_len, s.tokens.end());
    o.samples.push_back({gen, text[id], finish_reason(m.cfg, opt, gen, static_cast<int>(s.tokens.size()), a.window > 0 ? INT_MAX : eo.context)});
  }
  double sum = 0;
  for (double ms : step_ms) sum += ms;
  o.tpot_ms = step_ms.empty() ? 0 : sum / step_ms.size();
  o.kv_bytes = peak;
  const Sequence& r = e.seq(root);
  if (!a.kv_load.empty()) {
    o.snapshot = {{"loaded", a.kv_load}, {"restored_tokens", r.snapshot_error.empty() ? r.reused_tokens : 0}};
    if (!r.snapshot_error.empty()) {
      o.snapshot["refused"] = r.snapshot_error;
      std::fprintf(stderr, "kvlm: warning: %s; the prompt is computed instead\n", r.snapshot_error.c_str());
    }
  }
  if (!a.kv_save.empty()) {
    if (!r.snapshot_error.empty() && a.kv_load.empty()) fail(r.snapshot_error);
    if (r.state == SeqState::Finished) o.snapshot["saved"] = a.kv_save;
  }
  if (a.kv_stats && o.ledger.is_null()) {
    KvLedger L = e.ledger();
    o.ledger = L.to_json();
    o.ledger_text = L.to_text();
  }
  return o;
}

int run_generate(const GenerateArgs& a) {
  if (a.layout != "paged" && a.layout != "contiguous") fail("--kv-layout must be paged or contiguous");
  if (a.parallel > 1 && (a.no_kv_cache || a.layout != "paged")) fail("--parallel needs the paged KV cache");
  if (a.window > 0 && a.no_kv_cache) fail("--window (attention sinks) needs the KV cache");
  if ((!a.kv_host_capacity.empty() || !a.kv_disk_dir.empty()) && (a.no_kv_cache || a.layout != "paged"))
    fail("--kv-host-capacity and --kv-disk-dir need the paged KV cache");
  if ((!a.kv_save.empty() || !a.kv_load.empty()) && (a.no_kv_cache || a.layout != "paged" || a.parallel > 1))
    fail("--kv-save and --kv-load need the paged KV cache and one sequence");
  if (a.prompt.empty() && a.kv_load.empty()) fail("give --prompt (or --kv-load FILE to continue a saved sequence)");
  check_kv_dtype_name(a.kv_dtype);  // before the (slow) model load
  auto model = load_model(a.model, a.weights);
  const DType kv_dtype = kv_dtype_for(a.kv_dtype, *model, a.window > 0);
  if (a.window > 0 && model->cfg.rope == RopeKind::None)
    fail("attention sinks need a RoPE model: ", model->cfg.arch, " bakes positions into its embeddings");
  auto tok = load_tokenizer_for(a.model, a.tokenizer, *model);
  // --kv-load without --prompt continues the saved sequence: its tokens are the prompt.
  std::vector<int> prompt = a.prompt.empty() ? kv_snapshot_tokens(a.kv_load) : tok->encode_prompt(a.prompt);
  if (prompt.empty()) fail("prompt is empty and the tokenizer adds no BOS: give a prompt");
  GenerateOptions opt;
  opt.max_new_tokens = a.max_new_tokens;
  opt.sampling = {a.temperature, a.top_k, a.top_p, a.seed, tok->vocab_size()};
  opt.use_kv_cache = !a.no_kv_cache;
  opt.stop_at_eos = !a.ignore_eos;
  opt.context = a.ctx;
  opt.kv_dtype = kv_dtype;
  opt.kv_residual = a.kv_residual;
  opt.sink_tokens = a.sink_tokens;
  opt.window = a.window;
  if (a.window == 0 && static_cast<int>(prompt.size()) > (a.ctx > 0 ? a.ctx : model->cfg.max_seq_len))
    fail("prompt of ", prompt.size(), " tokens is longer than the context of ",
         a.ctx > 0 ? a.ctx : model->cfg.max_seq_len, " tokens");
  const bool paged = !a.no_kv_cache && a.layout == "paged";
  if (!a.json && a.parallel == 1) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  Outcome o = paged ? run_paged(*model, *tok, prompt, a, opt) : run_single(*model, *tok, prompt, opt, !a.json);
  const char* mode = a.no_kv_cache ? "off" : paged ? "paged" : "contiguous";
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt;
    j["generated_ids"] = o.samples[0].ids;
    j["text"] = o.samples[0].text;
    j["finish_reason"] = finish_reason_name(o.samples[0].finish);
    j["stopped_by"] = stopped_by_name(o.samples[0].finish);
    if (a.parallel > 1) {
      j["samples"] = nlohmann::json::array();
      for (const Sample& s : o.samples)
        j["samples"].push_back({{"generated_ids", s.ids}, {"text", s.text}, {"finish_reason", finish_reason_name(s.finish)},
                                {"stopped_by", stopped_by_name(s.finish)}});
    }
    j["ttft_ms"] = o.ttft_ms;
    j["tpot_ms"] = o.tpot_ms;
    j["kv_cache_bytes"] = o.kv_bytes;
    j["kv_cache"] = mode;
    if (!a.no_kv_cache) j["kv_dtype"] = dtype_name(kv_dtype);  // what --kv-dtype (auto) ran
    if (!o.snapshot.is_null()) j["kv_snapshot"] = o.snapshot;
    if (a.kv_stats) j["kv_ledger"] = o.ledger;
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  if (a.parallel == 1) std::fputc('\n', stdout);
  if (a.parallel > 1)
    for (size_t i = 0; i < o.samples.size(); ++i)
      std::printf("--- sample %zu ---\n%s%s\n", i + 1, a.prompt.c_str(), o.samples[i].text.c_str());
  size_t generated = 0;
  for (const Sample& s : o.samples) generated += s.ids.size();
  double tps = o.tpot_ms > 0 ? 1000.0 / o.tpot_ms : 0.0;
  const std::string cache = a.no_kv_cache ? mode : std::string(mode) + " " + dtype_name(kv_dtype);  // "paged f16"
  std::fprintf(stderr,
               "[kvlm] prompt %zu tokens, generated %zu | TTFT %.2f ms | TPOT %.3f ms (%.1f steps/s) | KV cache %s, "
               "%zu bytes\n",
               prompt.size(), generated, o.ttft_ms, o.tpot_ms, tps, cache.c_str(), o.kv_bytes);
  if (a.kv_stats) std::fputs(o.ledger_text.c_str(), stderr);
  for (const Sample& s : o.samples)
    if (s.finish == FinishReason::Context) {  // never a silent cut
      std::fprintf(stderr, "[kvlm] stopped at the context limit of %d tokens (finish_reason: length)\n",
                   a.ctx > 0 ? a.ctx : model->cfg.max_seq_len);
      break;
    }
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt");
  add_model_options(sub, *a, kModelRequired | kModelTokenizer);
  sub->add_option("--prompt", a->prompt, "prompt text (optional with --kv-load: continue the saved sequence)");
  sub->add_option("--kv-save", a->kv_save, "save the sequence's tokens and KV to FILE when it finishes");
  sub->add_option("--kv-load", a->kv_load,
                  "restore KV from FILE (saved by --kv-save) for the prompt's longest common prefix, or, without "
                  "--prompt, continue the saved sequence");
  sub->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 24));
  add_sampling_options(sub, *a);
  sub->add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole sequence at every step");
  sub->add_option("--kv-layout", a->layout, "paged (default) or contiguous");
  add_kv_codec_options(sub, *a);
  add_sink_options(sub, *a);
  add_kv_pool_options(sub, *a);
  add_kv_tier_options(sub, *a);
  sub->add_flag("--kv-stats", a->kv_stats, "print the KV memory ledger at its peak");
  sub->add_option("--parallel", a->parallel, "sample K continuations that share the prompt's KV blocks")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--json", a->json, "print one JSON object instead of streaming text");
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past EOS/BOS");
  sub->add_option("--ctx", a->ctx, "context length (default: the model's); RoPE models may exceed it")
      ->check(CLI::Range(1, 1 << 24));
  return [a] { return run_generate(*a); };
}

}  // namespace kvlm::cli
