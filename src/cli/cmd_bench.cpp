// kvlm bench: the KV-cache experiment. TTFT and TPOT with the cache on and off, on a real model
// or on a built-in shape with synthetic weights, plus the cache's memory and a context sweep.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/common.h"
#include "cli/svg_plot.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "kernels/dot.h"
#include "kernels/roofline.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace {

using nlohmann::json;

struct BenchArgs {
  std::string weights;  // "" = as stored in the file
  std::string preset = "distilgpt2", model, tokenizer, prompt = "What is KV caching?", prompt_ids, sweep_out = "kv_sweep.svg";
  int prompt_tokens = 0, runs = 10, warmup = 1, sweep_max = 1024, sweep_points = 16;
  std::vector<int> new_tokens = {20, 100};
  std::string kv_dtype = "f32";
  int kv_residual = 128, decode_steps = 16;
  std::vector<int> decode_at;                 // contexts for the KV-type table
  std::vector<std::string> kv_dtypes = {"f32", "bf16", "int8", "int4"};
  bool json = false, sweep = false, cache_on_only = false, no_roofline = false;
  uint64_t seed = 0;
};

struct Stat {
  double mean = 0, std = 0;
  json to_json() const { return {{"mean", mean}, {"std", std}}; }
};

Stat stat(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(s.std / (v.size() - 1)) : 0.0;
  return s;
}

double peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss * 1024.0;
}

// A live counter on a terminal; one line per finished cell when stderr is a log file.
void progress(const std::string& what, int i, int n) {
  static const bool tty = isatty(fileno(stderr));
  if (tty) std::fprintf(stderr, "\r[bench] %-44s %3d/%d%s", what.c_str(), i, n, i == n ? "\n" : "");
  else if (i == n) std::fprintf(stderr, "[bench] %-44s done (%d)\n", what.c_str(), n);
  std::fflush(stderr);
}

std::vector<int> prompt_ids(const BenchArgs& a, const Model& m) {
  std::vector<int> ids;
  if (!a.prompt_ids.empty()) {
    ids = parse_ids(a.prompt_ids);
  } else if (!a.model.empty()) {
    ids = load_tokenizer_for(a.model, a.tokenizer, m)->encode_prompt(a.prompt);
  } else {
    if (a.prompt != "What is KV caching?") fail("--prompt needs --model (a tokenizer); presets use token ids");
    ids = preset_prompt_ids(m.cfg);
  }
  if (a.prompt_tokens > 0) {  // repeat the prompt to the requested length
    std::vector<int> base = ids;
    ids.clear();
    while (static_cast<int>(ids.size()) < a.prompt_tokens) ids.push_back(base[ids.size() % base.size()]);
  }
  return ids;
}

// Mean TTFT or TPOT over `runs` generations, after warm-ups.
Stat measure(const Model& m, const std::vector<int>& prompt, bool cache, int new_tokens, int runs, int warmup,
             const std::string& label, const BenchArgs& a) {
  GenerateOptions opt;
  opt.kv_dtype = parse_kv_dtype(a.kv_dtype);
  opt.kv_residual = a.kv_residual;
  opt.max_new_tokens = new_tokens;
  opt.use_kv_cache = cache;
  opt.stop_at_eos = false;
  for (int i = 0; i < warmup; ++i) generate(m, prompt, opt);
  std::vector<double> v;
  for (int i = 0; i < runs; ++i) {
    progress(label, i, runs);
    GenerateResult r = generate(m, prompt, opt);
    v.push_back(new_tokens == 1 ? r.ttft_ms : r.tpot_ms());
  }
  progress(label, runs, runs);
  return stat(v);
}

// Per-step decode latency against position: one long cached generation, and a no-cache step
// (a full forward over p tokens) at sampled positions.
json sweep(const Model& m, const BenchArgs& a, std::vector<Series>& plot) {
  const int max_pos = std::min(a.sweep_max, m.cfg.max_seq_len - 1);
  if (max_pos < 2 * a.sweep_points) fail("--sweep-max ", max_pos, " is too small for the sweep");
  std::vector<int> one = {std::clamp(m.cfg.bos_id, 0, m.cfg.vocab_size - 1)};
  GenerateOptions opt;
  opt.max_new_tokens = max_pos;
  opt.stop_at_eos = false;
  opt.context = max_pos + 1;
  std::fprintf(stderr, "[bench] sweep: cached decode to position %d\n", max_pos);
  GenerateResult r = generate(m, one, opt);
  Series on{"KV cache on", "#1f77b4", {}, {}}, off{"KV cache off (recompute)", "#d62728", {}, {}};
  json rows = json::array();
  std::vector<float> logits;
  for (int k = 1; k <= a.sweep_points; ++k) {
    int pos = max_pos * k / a.sweep_points;
    // step_ms[i] decodes the token at position i+2; average the steps near pos.
    int lo = std::max(0, pos - 8), hi = std::min<int>(r.step_ms.size(), pos + 8);
    double on_ms = 0;
    for (int i = lo; i < hi; ++i) on_ms += r.step_ms[i];
    on_ms /= std::max(1, hi - lo);
    std::vector<int> seq(pos, one[0]);
    ContiguousKvCache scratch(m.cfg, pos);
    progress("sweep: no-cache step at position " + std::to_string(pos), k - 1, a.sweep_points);
    auto t0 = std::chrono::steady_clock::now();
    forward(m, scratch, seq.data(), pos, LogitsFor::Last, logits);
    double off_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    on.x.push_back(pos);
    on.y.push_back(on_ms);
    off.x.push_back(pos);
    off.y.push_back(off_ms);
    rows.push_back({{"position", pos}, {"cache_on_ms", on_ms}, {"cache_off_ms", off_ms}});
  }
  progress("sweep done", a.sweep_points, a.sweep_points);
  plot = {on, off};
  return rows;
}

// Decode TPOT and KV bytes per KV type at long contexts. The cache is filled with random K/V
// (decode cost depends on the cache's size and type, not its values), so no long prefill runs.
json kv_type_table(const Model& m, const BenchArgs& a) {
  json rows = json::array();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const ModelConfig& c = m.cfg;
  for (const std::string& name : a.kv_dtypes) {
    KvDtype dt = parse_kv_dtype(name);
    for (int ctx : a.decode_at) {
      ContiguousKvCache cache(c, ctx + a.decode_steps + 1, dt, a.kv_residual);
      std::vector<float> k(static_cast<size_t>(c.kv_dim())), v(k.size());
      for (int p = 0; p < ctx; ++p)
        for (int l = 0; l < c.n_layers; ++l) {
          for (float& x : k) x = nd(rng);
          for (float& x : v) x = nd(rng);
          cache.store(l, p, 1, k.data(), v.data());
        }
      cache.set_length(ctx);
      std::vector<float> logits;
      int tok = 1;
      forward(m, cache, &tok, 1, LogitsFor::Last, logits);  // warm-up step
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.decode_steps; ++i) forward(m, cache, &tok, 1, LogitsFor::Last, logits);
      double tpot = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / a.decode_steps;
      KvRowCodec codec{dt, c.kv_dim(), c.head_dim};
      size_t hot = dt == KvDtype::F32 ? 0 : std::min(ctx, a.kv_residual);
      size_t bytes = 2ull * c.n_layers * ((ctx - hot) * codec.bytes() + hot * c.kv_dim() * 4);
      std::fprintf(stderr, "[bench] KV %s at %d: %.2f ms/token\n", name.c_str(), ctx, tpot);
      rows.push_back({{"kv_dtype", name}, {"context", ctx}, {"tpot_ms", tpot}, {"kv_bytes", bytes},
                      {"kv_bytes_per_token", static_cast<double>(bytes) / ctx}});
    }
  }
  return rows;
}

// Everything a run could trip on is checked before the first (slow) measurement.
void check_before_runs(const BenchArgs& a, const ModelConfig& c) {
  parse_kv_dtype(a.kv_dtype);
  for (const std::string& t : a.kv_dtypes) parse_kv_dtype(t);
  for (int ctx : a.decode_at)
    if (ctx + a.decode_steps + 1 > c.max_seq_len && c.learned_positions)
      fail("--decode-at ", ctx, " + ", a.decode_steps + 1, " steps exceed the context of ", c.max_seq_len,
           " of a model with learned positions");
  if (a.sweep) {
    std::ofstream f(a.sweep_out, std::ios::app);
    if (!f) fail(a.sweep_out, ": cannot write the sweep plot there");
  }
}

int run_bench(const BenchArgs& a) {
  std::string name;
  std::unique_ptr<Model> m = model_or_preset(a.model, a.preset, a.weights, a.seed, name);
  const ModelConfig& c = m->cfg;
  check_before_runs(a, c);
  if (!a.decode_at.empty()) {  // the KV-type table alone
    json t = kv_type_table(*m, a);
    if (a.json) {
      std::puts(json{{"model", name}, {"kv_types", t}, {"kv_residual", a.kv_residual}}.dump(1).c_str());
      return 0;
    }
    std::printf("decode with each KV type: %s, %d threads, residual %d f32 positions\n\n", name.c_str(),
                ThreadPool::global().size(), a.kv_residual);
    std::printf("%-8s %-9s %-12s %-14s %s\n", "KV type", "context", "TPOT ms", "KV MB", "bytes/token");
    for (const json& r : t)
      std::printf("%-8s %-9d %-12.2f %-14.1f %.0f\n", r["kv_dtype"].get<std::string>().c_str(), r["context"].get<int>(),
                  r["tpot_ms"].get<double>(), r["kv_bytes"].get<size_t>() / 1e6, r["kv_bytes_per_token"].get<double>());
    return 0;
  }
  std::vector<int> prompt = prompt_ids(a, *m);
  int longest = 1;
  for (int n : a.new_tokens) longest = std::max(longest, n);
  if (static_cast<int>(prompt.size()) + longest > c.max_seq_len)
    fail("prompt (", prompt.size(), ") + new tokens (", longest, ") exceed the context ", c.max_seq_len);

  json j;
  j["model"] = {{"name", name}, {"arch", c.arch}, {"params", m->n_params()}, {"weight_bytes", m->weight_bytes()},
                {"layers", c.n_layers}, {"dim", c.dim}, {"heads", c.n_heads}, {"kv_heads", c.n_kv_heads},
                {"head_dim", c.head_dim}, {"vocab", c.vocab_size}, {"context", c.max_seq_len}};
  j["threads"] = ThreadPool::global().size();
  j["isa"] = kernel_isa();
  j["prompt_tokens"] = prompt.size();
  j["runs"] = a.runs;
  j["warmup"] = a.warmup;
  std::vector<std::pair<std::string, bool>> modes = {{"cache_on", true}};
  if (!a.cache_on_only) modes.push_back({"cache_off", false});
  // TTFT: both prefills do the same work, so their runs alternate (on, off, on, ...) and see the
  // same machine state; measured one block after the other, the first block ran colder.
  {
    std::vector<std::vector<double>> ttft(modes.size());
    for (int i = 0; i < a.warmup + a.runs; ++i)
      for (size_t k = 0; k < modes.size(); ++k) {
        Stat one = measure(*m, prompt, modes[k].second, 1, 1, 0, "TTFT, cache on and off alternating", a);
        if (i >= a.warmup) ttft[k].push_back(one.mean);
      }
    for (size_t k = 0; k < modes.size(); ++k) j["results"][modes[k].first]["ttft_ms"] = stat(ttft[k]).to_json();
  }
  for (auto& [key, cache] : modes) {
    std::string tag = cache ? "cache on" : "cache off";
    for (int n : a.new_tokens)
      j["results"][key]["tpot_ms"][std::to_string(n)] =
          measure(*m, prompt, cache, n, a.runs, a.warmup, tag + ": TPOT @" + std::to_string(n), a).to_json();
  }
  if (!a.cache_on_only) {
    auto ratio = [&](const json& off, const json& on) { return off["mean"].get<double>() / on["mean"].get<double>(); };
    j["speedup"]["ttft"] = ratio(j["results"]["cache_off"]["ttft_ms"], j["results"]["cache_on"]["ttft_ms"]);
    for (int n : a.new_tokens) {
      std::string k = std::to_string(n);
      j["speedup"]["tpot_" + k] = ratio(j["results"]["cache_off"]["tpot_ms"][k], j["results"]["cache_on"]["tpot_ms"][k]);
    }
  }
  // KV memory: the formula, and what the cache actually allocates for the full context.
  ContiguousKvCache probe(c, c.max_seq_len);  // sizes only: nothing is allocated for the full context
  int global_layers = 0;
  for (int w : c.layer_window) global_layers += w == 0 || w >= c.max_seq_len;
  size_t used_tokens = prompt.size() + longest;
  j["kv"] = {{"bytes_per_token_formula", c.kv_bytes_per_token(4)},
             {"formula", "2 x " + std::to_string(c.n_layers) + " layers x " + std::to_string(c.n_kv_heads) +
                             " kv_heads x " + std::to_string(c.head_dim) + " head_dim x 4 bytes"},
             {"allocated_bytes", probe.bytes_for(c.max_seq_len)},  // what the full context would hold
             {"allocated_for_positions", c.max_seq_len},
             {"allocated_bytes_per_position", static_cast<double>(probe.bytes_for(c.max_seq_len)) / c.max_seq_len},
             {"global_layers", global_layers},
             {"windowed_layers", c.n_layers - global_layers},
             {"bytes_in_use_at_longest_run", [&] {
                size_t b = 0;
                for (int l = 0; l < c.n_layers; ++l)
                  b += 2ull * c.kv_dim() * 4 * std::min<size_t>(used_tokens, probe.layer_slots(l));
                return b;
              }()}};
  std::vector<Series> plot;
  if (a.sweep) {
    j["sweep"] = sweep(*m, a, plot);
    std::ofstream f(a.sweep_out);
    if (!f) fail(a.sweep_out, ": cannot write the sweep plot");
    f << svg_line_chart("Per-token decode latency vs position: " + name, "position (tokens in context)",
                        "ms per generated token", plot);
    j["sweep_plot"] = a.sweep_out;
  }
  j["peak_rss_bytes"] = peak_rss_bytes();
  if (!a.no_roofline) {
    // Decode reads every matrix once per token (the embedding only one row) plus the KV so far.
    size_t matrix_bytes = m->weight_bytes() - m->tok_emb.size() * sizeof(float) - m->pos_emb.size() * sizeof(float);
    if (m->lm_head.out == 0) matrix_bytes += m->tok_emb.size() * sizeof(float);  // tied f32 head reads it all
    double triad = measure_triad_gbps();
    json roof{{"triad_gbps", triad}, {"threads", ThreadPool::global().size()}, {"matrix_bytes", matrix_bytes}};
    for (int n : a.new_tokens) {
      double ctx = prompt.size() + n / 2.0;  // mean position of the decode steps
      double bytes = matrix_bytes + ctx * c.kv_bytes_per_token(4);
      double tpot = j["results"]["cache_on"]["tpot_ms"][std::to_string(n)]["mean"].get<double>();
      double gbps = bytes / (tpot / 1000) / 1e9;
      roof["decode"][std::to_string(n)] = {{"bytes_per_token", bytes}, {"gbps", gbps}, {"fraction_of_triad", gbps / triad}};
    }
    double ttft = j["results"]["cache_on"]["ttft_ms"]["mean"].get<double>();
    // 2 FLOP per matrix weight per prompt token (embedding lookups are free).
    size_t matrix_params = m->n_params() - m->tok_emb.size() - m->pos_emb.size() + c.vocab_size * static_cast<size_t>(c.dim);
    roof["prefill_gflops"] = 2.0 * static_cast<double>(matrix_params) * prompt.size() / (ttft / 1000) / 1e9;
    j["roofline"] = roof;
  }

  if (a.json) {
    std::puts(j.dump(1).c_str());
    return 0;
  }
  const json& r = j["results"];
  auto cell = [](const json& s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%9.3f ± %-8.3f", s["mean"].get<double>(), s["std"].get<double>());
    return std::string(buf);
  };
  std::printf("kvlm bench: %s | %s, %.1f MB weights (%s) | %d threads, %s kernels\n", name.c_str(), c.arch.c_str(),
              m->weight_bytes() / 1e6, a.weights.empty() ? weight_format_name(m->stored_format) : a.weights.c_str(),
              ThreadPool::global().size(), kernel_isa());
  std::printf("prompt %zu tokens | mean ± std over %d runs after %d warm-up\n\n", prompt.size(), a.runs, a.warmup);
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
              kv["allocated_bytes"].get<size_t>() / 1e6, c.max_seq_len,
              kv["allocated_bytes_per_position"].get<double>(), global_layers, c.n_layers - global_layers);
  std::printf("          in use after the longest run (%zu tokens): %.2f MB\n", used_tokens,
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
    std::printf("  prefill (TTFT, %zu tokens): %.1f GFLOP/s\n", prompt.size(), rf["prefill_gflops"].get<double>());
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
  sub->add_option("--model", a->model, "benchmark a real model (llama2.c .bin or HF folder) instead");
  sub->add_option("--weights", a->weights, "run the matrices as f32, f16, bf16, q8_0 or q4_0 (default: as stored)");
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer for --model (default: found beside it)");
  sub->add_option("--prompt", a->prompt, "prompt text (with --model)");
  sub->add_option("--prompt-ids", a->prompt_ids, "prompt as comma-separated token ids (no tokenizer needed)");
  sub->add_option("--prompt-tokens", a->prompt_tokens, "repeat the prompt's ids to N tokens")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--new-tokens", a->new_tokens, "TPOT lengths (default 20 100)")->delimiter(',')->check(CLI::Range(2, 1 << 20));
  sub->add_option("--runs", a->runs, "timed runs per cell (default 10)")->check(CLI::Range(1, 100000));
  sub->add_option("--warmup", a->warmup, "untimed runs first (default 1)")->check(CLI::Range(0, 1000));
  sub->add_option("--seed", a->seed, "seed of the synthetic weights");
  sub->add_flag("--cache-on-only", a->cache_on_only, "skip the (slow) no-cache runs");
  sub->add_flag("--json", a->json, "print one JSON object");
  sub->add_option("--kv-dtype", a->kv_dtype, "KV element type for the experiment: f32 (default), bf16, int8, int4");
  sub->add_option("--kv-residual", a->kv_residual, "newest positions kept f32 with a quantized KV (default 128)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--decode-at", a->decode_at, "instead: decode TPOT and KV bytes per KV type at these contexts")
      ->delimiter(',')->check(CLI::Range(1, 1 << 20));
  sub->add_option("--kv-dtypes", a->kv_dtypes, "KV types for --decode-at (default f32,bf16,int8,int4)")->delimiter(',');
  sub->add_option("--decode-steps", a->decode_steps, "timed decode steps per cell (default 16)")->check(CLI::Range(1, 100000));
  sub->add_flag("--no-roofline", a->no_roofline, "skip the bandwidth measurement");
  sub->add_flag("--sweep", a->sweep, "per-step decode latency against position, cache on and off, with a plot");
  sub->add_option("--sweep-max", a->sweep_max, "largest position of the sweep (default 1024)")->check(CLI::Range(32, 1 << 20));
  sub->add_option("--sweep-points", a->sweep_points, "positions sampled (default 16)")->check(CLI::Range(2, 1000));
  sub->add_option("--sweep-out", a->sweep_out, "SVG file for the sweep plot (default kv_sweep.svg)");
  sub->callback([a, sub] {
    if (sub->count("--preset") && sub->count("--model")) throw CLI::ValidationError("--preset and --model exclude each other");
  });
  return [a] { return run_bench(*a); };
}

}  // namespace kvlm::cli
