// kvlm bench: the KV-cache experiment's command line and its text report; the measuring is
// bench_report() (cli/bench_report.cpp), which the Python package calls too.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/bench_report.h"
#include "cli/common.h"
#include "cli/options.h"

namespace kvlm::cli {

namespace {

using nlohmann::json;

int run_bench(const BenchArgs& a) {
  json j = bench_report(a);
  if (a.json) {
    std::puts(j.dump(1).c_str());
    return 0;
  }
  if (j.contains("kv_types")) {
    const json& t = j["kv_types"];
    const std::string name = j["model"].get<std::string>();
    std::printf("decode with each KV type: %s, %d threads, residual %d f32 positions\n\n", name.c_str(),
                j["threads"].get<int>(), a.kv_residual);
    std::printf("%-8s %-8s %-9s %-9s %-9s %-12s %-10s %-12s %-11s %-9s %s\n", "KV type", "context", "TPOT ms", "median",
                "KV MB", "bytes/token", "triad GB/s", "roofline ms", "x roofline", "(median)", "steal %");
    for (const json& r : t) {
      char steal[16] = "-";
      if (!r["host_steal_pct"].is_null()) std::snprintf(steal, sizeof steal, "%.1f", r["host_steal_pct"].get<double>());
      std::printf("%-8s %-8d %-9.2f %-9.2f %-9.1f %-12.0f %-10.1f %-12.2f %-11.2f %-9.2f %s\n",
                  r["kv_dtype"].get<std::string>().c_str(), r["context"].get<int>(), r["tpot_ms"].get<double>(),
                  r["tpot_median_ms"].get<double>(), r["kv_bytes"].get<size_t>() / 1e6, r["kv_bytes_per_token"].get<double>(),
                  r["triad_gbps"].get<double>(), r["roofline_ms"].get<double>(), r["tpot_over_roofline"].get<double>(),
                  r["median_over_roofline"].get<double>(), steal);
    }
    if (!t.empty())
      std::printf("\nroofline: %.0f MB of matrices + the KV, read once per step at the triad measured around each row's\n"
                  "steps (the faster of just before and just after them). TPOT is the steps' mean, median their\n"
                  "median step; steal %% is the host's share of this machine's CPU time during them (VMs only)\n",
                  t[0]["matrix_bytes"].get<size_t>() / 1e6);
    return 0;
  }
  const std::string name = j["model"]["name"].get<std::string>();
  const int max_seq_len = j["model"]["context"].get<int>();
  const json& r = j["results"];
  auto cell = [](const json& s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%9.3f ± %-8.3f", s["mean"].get<double>(), s["std"].get<double>());
    return std::string(buf);
  };
  const json& model = j["model"];
  const size_t prompt_tokens = j["prompt_tokens"].get<size_t>();
  // A mixed file (Q4_K_M) names each type with its bytes.
  std::string types;
  for (const auto& [type, bytes] : model["weight_bytes_by_type"].items())
    if (bytes.get<double>() >= 1e6) types += (types.empty() ? "" : ", ") + type + " " + std::to_string(static_cast<long>(bytes.get<double>() / 1e6));
  std::printf("kvlm bench: %s | %s, %.1f MB weights (%s; MB by type: %s) | %d threads, %s kernels\n", name.c_str(),
              model["arch"].get<std::string>().c_str(), model["weight_bytes"].get<double>() / 1e6,
              model["weights"].get<std::string>().c_str(), types.c_str(), j["threads"].get<int>(), j["isa"].get<std::string>().c_str());
  std::printf("prompt %zu tokens | mean ± std over %d runs after %d warm-up\n\n", prompt_tokens, a.runs, a.warmup);
  std::printf("%-22s %-22s %-22s %s\n", "metric (ms)", "KV cache on", "KV cache off", "cache speedup");
  auto row = [&](const std::string& label, const json& on, const json* off, const char* sk) {
    std::printf("%-22s %-22s %-22s %s\n", label.c_str(), cell(on).c_str(), off ? cell(*off).c_str() : "-",
                off ? (std::to_string(j["speedup"][sk].get<double>()).substr(0, 5) + "x").c_str() : "-");
  };
  row("TTFT (1 new token)", r["cache_on"]["ttft_ms"], a.cache_on_only ? nullptr : &r["cache_off"]["ttft_ms"], "ttft");
  for (int n : a.new_tokens) {
    std::string k = std::to_string(n), sk = "tpot_" + k;
    row("TPOT @" + k + " new tokens", r["cache_on"]["tpot_ms"][k],
        a.cache_on_only ? nullptr : &r["cache_off"]["tpot_ms"][k], sk.c_str());
  }
  const json& kv = j["kv"];
  std::printf("\nKV cache: %zu bytes/token by formula (%s)\n", kv["bytes_per_token_formula"].get<size_t>(),
              kv["formula"].get<std::string>().c_str());
  std::printf("          a full context holds %.2f MB for %d positions = %.0f bytes/position (%d global layers, %d windowed)\n",
              kv["allocated_bytes"].get<size_t>() / 1e6, max_seq_len, kv["allocated_bytes_per_position"].get<double>(),
              kv["global_layers"].get<int>(), kv["windowed_layers"].get<int>());
  if (kv.contains("expanded_bytes_per_token") && kv["expanded_bytes_per_token"].get<size_t>() > 0)
    std::printf("          latent attention: keys and values expanded per head would take %zu bytes/token (%.1fx)\n",
                kv["expanded_bytes_per_token"].get<size_t>(),
                kv["expanded_bytes_per_token"].get<double>() / kv["bytes_per_token_formula"].get<double>());
  if (kv["residual_tokens"].get<int>() > 0)
    std::printf("          beside them the newest %d positions at f32 (--kv-residual), counted below\n",
                kv["residual_tokens"].get<int>());
  std::printf("          in use after the longest run (%zu tokens): %.2f MB\n", kv["tokens_at_longest_run"].get<size_t>(),
              kv["bytes_in_use_at_longest_run"].get<size_t>() / 1e6);
  std::printf("peak RSS: %.1f MB\n", j["peak_rss_bytes"].get<double>() / 1e6);
  if (j.contains("roofline")) {
    const json& rf = j["roofline"];
    std::printf("\nroofline: triad bandwidth %.1f GB/s at %d threads; decode reads %.1f MB of matrices per token\n",
                rf["triad_gbps"].get<double>(), rf["threads"].get<int>(), rf["matrix_bytes"].get<size_t>() / 1e6);
    for (int n : a.new_tokens) {
      const json& d = rf["decode"][std::to_string(n)];
      std::printf("  decode @%d: %.1f GB/s = %.0f%% of triad\n", n, d["gbps"].get<double>(),
                  100 * d["fraction_of_triad"].get<double>());
    }
    std::printf("  prefill (TTFT, %zu tokens): %.1f GFLOP/s\n", prompt_tokens, rf["prefill_gflops"].get<double>());
  }
  if (a.sweep) {
    std::printf("\n%-10s %-14s %-14s %s\n", "position", "cache on ms", "cache off ms", "speedup");
    for (const json& s : j["sweep"])
      std::printf("%-10d %-14.3f %-14.3f %.1fx\n", s["position"].get<int>(), s["cache_on_ms"].get<double>(),
                  s["cache_off_ms"].get<double>(), s["cache_off_ms"].get<double>() / s["cache_on_ms"].get<double>());
    std::printf("plot: %s\n", a.sweep_out.c_str());
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand("bench", "TTFT and TPOT with the KV cache on and off");
  sub->add_option("--preset", a->preset, "built-in shape with synthetic weights: distilgpt2 (default), gpt2, "
                                         "gpt-neo-1.3B, tinyllama-1.1b");
  add_model_options(sub, *a, kModelTokenizer, "benchmark a real model (llama2.c .bin, GGUF or HF folder) instead");
  sub->add_option("--prompt", a->prompt, "prompt text (with --model)");
  sub->add_option("--prompt-ids", a->prompt_ids, "prompt as comma-separated token ids (no tokenizer needed)");
  sub->add_option("--prompt-tokens", a->prompt_tokens, "repeat the prompt's ids to N tokens")
      ->check(CLI::Range(kBenchPromptTokens.lo, kBenchPromptTokens.hi));
  sub->add_option("--new-tokens", a->new_tokens, "TPOT lengths (default 20 100)")
      ->delimiter(',')
      ->check(CLI::Range(kBenchNewTokens.lo, kBenchNewTokens.hi));
  sub->add_option("--runs", a->runs, "timed runs per cell (default 10)")->check(CLI::Range(kBenchRuns.lo, kBenchRuns.hi));
  sub->add_option("--warmup", a->warmup, "untimed runs first (default 1)")->check(CLI::Range(kBenchWarmup.lo, kBenchWarmup.hi));
  sub->add_option("--seed", a->seed, "seed of the synthetic weights");
  sub->add_flag("--cache-on-only", a->cache_on_only, "skip the (slow) no-cache runs");
  sub->add_flag("--json", a->json, "print one JSON object");
  add_kv_codec_options(sub, *a);
  sub->add_option("--decode-at", a->decode_at, "instead: decode TPOT and KV bytes per KV type at these contexts")
      ->delimiter(',')->check(CLI::Range(kBenchDecodeAt.lo, kBenchDecodeAt.hi));
  sub->add_option("--kv-dtypes", a->kv_dtypes, "KV types for --decode-at (default f32,f16,bf16,int8,int4)")->delimiter(',');
  sub->add_option("--decode-steps", a->decode_steps, "timed decode steps per cell (default 16)")
      ->check(CLI::Range(kBenchDecodeSteps.lo, kBenchDecodeSteps.hi));
  sub->add_flag("--no-roofline", a->no_roofline, "skip the bandwidth measurement");
  sub->add_flag("--sweep", a->sweep, "per-step decode latency against position, cache on and off, with a plot");
  sub->add_option("--sweep-max", a->sweep_max, "largest position of the sweep (default 1024)")
      ->check(CLI::Range(kBenchSweepMax.lo, kBenchSweepMax.hi));
  sub->add_option("--sweep-points", a->sweep_points, "positions sampled (default 16)")
      ->check(CLI::Range(kBenchSweepPoints.lo, kBenchSweepPoints.hi));
  sub->add_option("--sweep-out", a->sweep_out, "SVG file for the sweep plot (default kv_sweep.svg)");
  sub->callback([a, sub] {
    if (sub->count("--preset") && sub->count("--model")) throw CLI::ValidationError("--preset and --model exclude each other");
  });
  return [a] { return run_bench(*a); };
}

}  // namespace kvlm::cli
