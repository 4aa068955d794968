// bench_report(): the measurements of the KV-cache experiment (see bench_report.h).
#include "cli/bench_report.h"

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
#include "engine/forward.h"
#include "engine/generator.h"
#include "kernels/dot.h"
#include "kernels/roofline.h"
#include "kv/kv_cache.h"
#include "kv/kv_pages.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace {

using nlohmann::json;

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
void progress(const std::string& what, int i, int n, bool quiet) {
  if (quiet) return;
  static const bool tty = isatty(fileno(stderr));
  if (tty) std::fprintf(stderr, "\r[bench] %-44s %3d/%d%s", what.c_str(), i, n, i == n ? "\n" : "");
  else if (i == n) std::fprintf(stderr, "[bench] %-44s done (%d)\n", what.c_str(), n);
  std::fflush(stderr);
}

// The CLI's ranges (bench_report.h), for callers that do not come through it (Python).
void check_args(const BenchArgs& a) {
  auto in = [](long v, IntRange r, const char* what) {
    if (v < r.lo || v > r.hi) fail(what, " must be in [", r.lo, ", ", r.hi, "], got ", v);
  };
  if (a.prompt_tokens != 0) in(a.prompt_tokens, kBenchPromptTokens, "prompt_tokens");
  in(a.runs, kBenchRuns, "runs");
  in(a.warmup, kBenchWarmup, "warmup");
  in(a.kv_residual, kBenchKvResidual, "kv_residual");
  check_kv_dtype_name(a.kv_dtype);
  in(a.decode_steps, kBenchDecodeSteps, "decode_steps");
  in(a.sweep_max, kBenchSweepMax, "sweep_max");
  in(a.sweep_points, kBenchSweepPoints, "sweep_points");
  if (a.new_tokens.empty()) fail("new_tokens is empty");
  for (int n : a.new_tokens) in(n, kBenchNewTokens, "each of new_tokens");
  for (int n : a.decode_at) in(n, kBenchDecodeAt, "each of decode_at");
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
  opt.kv_dtype = parse_dtype(a.kv_dtype, kInKvPages, "KV dtype");
  opt.kv_residual = a.kv_residual;
  opt.max_new_tokens = new_tokens;
  opt.use_kv_cache = cache;
  opt.stop_at_eos = false;
  for (int i = 0; i < warmup; ++i) generate(m, prompt, opt);
  std::vector<double> v;
  for (int i = 0; i < runs; ++i) {
    progress(label, i, runs, a.quiet);
    GenerateResult r = generate(m, prompt, opt);
    v.push_back(new_tokens == 1 ? r.ttft_ms : r.tpot_ms());
  }
  progress(label, runs, runs, a.quiet);
  return stat(v);
}

// Per-step decode latency against position: one long cached generation, and a no-cache step
// (a full forward over p tokens) at sampled positions.
json sweep(const Model& m, const BenchArgs& a, std::vector<Series>& plot) {
  const int max_pos = std::min(a.sweep_max, m.cfg.max_seq_len - 1);
  if (max_pos < 2 * a.sweep_points) fail("--sweep-max ", max_pos, " is too small for the sweep");
  std::vector<int> one = {std::clamp(m.cfg.bos_id, 0, m.cfg.vocab_size - 1)};
  GenerateOptions opt;
  opt.kv_dtype = parse_dtype(a.kv_dtype, kInKvPages, "KV dtype");
  opt.kv_residual = a.kv_residual;
  opt.max_new_tokens = max_pos;
  opt.stop_at_eos = false;
  opt.context = max_pos + 1;
  if (!a.quiet) std::fprintf(stderr, "[bench] sweep: cached decode to position %d\n", max_pos);
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
    progress("sweep: no-cache step at position " + std::to_string(pos), k - 1, a.sweep_points, a.quiet);
    auto t0 = std::chrono::steady_clock::now();
    forward(m, scratch, seq.data(), pos, LogitsFor::Last, logits);
    double off_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    on.x.push_back(pos);
    on.y.push_back(on_ms);
    off.x.push_back(pos);
    off.y.push_back(off_ms);
    rows.push_back({{"position", pos}, {"cache_on_ms", on_ms}, {"cache_off_ms", off_ms}});
  }
  progress("sweep done", a.sweep_points, a.sweep_points, a.quiet);
  plot = {on, off};
  return rows;
}

// Bytes one decode step reads at least: every matrix once (the embedding only one row; a tied f32
// head reads the table itself; of a MoE layer's experts, the ones a token uses).
size_t decode_matrix_bytes(const Model& m) {
  size_t bytes = m.active_weight_bytes() - m.embedding_bytes() - m.pos_emb.size() * sizeof(float);
  if (m.lm_head.out == 0) bytes += m.tok_emb.bytes();
  return bytes;
}

// Decode TPOT and KV bytes per KV type at long contexts, against the bandwidth roofline: the
// matrices and the KV read once per step at the triad bandwidth measured around each cell (the
// faster of just before and just after its steps: a VM's bandwidth drifts within a run, by a
// third within minutes on the EPYCs of docs/benchmarks.md). The cache is filled with random K/V
// (decode cost depends on the cache's size and type, not its values), so no long prefill runs.
json kv_type_table(const Model& m, const BenchArgs& a) {
  json rows = json::array();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const ModelConfig& c = m.cfg;
  const size_t matrix_bytes = decode_matrix_bytes(m);
  for (const std::string& name : a.kv_dtypes) {
    DType dt = parse_dtype(name, kInKvPages, "KV dtype");
    for (int ctx : a.decode_at) {
      ContiguousKvCache cache(c, ctx + a.decode_steps + 1, dt, a.kv_residual);
      std::vector<float> k(static_cast<size_t>(c.kv_dim())), v(k.size());
      for (int p = 0; p < ctx; ++p)
        for (int l = 0; l < c.n_layers; ++l) {
          for (float& x : k) x = nd(rng);
          for (float& x : v) x = nd(rng);
          cache.store(l, p, 1, k.data(), c.mla() ? k.data() : v.data());  // a latent row is both
        }
      cache.set_length(ctx);
      std::vector<float> logits;
      int tok = 1;
      forward(m, cache, &tok, 1, LogitsFor::Last, logits);  // warm-up step
      const double triad_before = measure_triad_gbps();
      // Each step timed: the mean is the cell's TPOT; the median and the host's steal say how much
      // of it a VM's neighbours took (a few steps of a cell can take twice the others).
      std::vector<double> step_ms;
      const double steal0 = host_steal_seconds();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.decode_steps; ++i) {
        auto s0 = std::chrono::steady_clock::now();
        forward(m, cache, &tok, 1, LogitsFor::Last, logits);
        step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
      }
      const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double steal1 = host_steal_seconds();
      const double tpot = wall_s * 1000 / a.decode_steps;
      std::sort(step_ms.begin(), step_ms.end());
      const size_t mid = step_ms.size() / 2;
      const double median = step_ms.size() % 2 ? step_ms[mid] : (step_ms[mid - 1] + step_ms[mid]) / 2;
      // Steal over the cell's wall time on every CPU of the machine (the pool runs one thread each).
      const double cpus = static_cast<double>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
      const json steal_pct = steal0 < 0 || steal1 < 0 ? json(nullptr) : json(100 * (steal1 - steal0) / (wall_s * cpus));
      const double triad = std::max(triad_before, measure_triad_gbps());
      const size_t bytes = cache.bytes_read_at(ctx);
      if (!a.quiet) std::fprintf(stderr, "[bench] KV %s at %d: %.2f ms/token (median step %.2f)\n", name.c_str(), ctx, tpot, median);
      const double roofline_ms = static_cast<double>(matrix_bytes + bytes) / (triad * 1e9) * 1000;
      rows.push_back({{"kv_dtype", name}, {"context", ctx}, {"tpot_ms", tpot}, {"tpot_median_ms", median},
                      {"host_steal_pct", steal_pct}, {"kv_bytes", bytes},
                      {"kv_bytes_per_token", static_cast<double>(bytes) / ctx}, {"matrix_bytes", matrix_bytes},
                      {"triad_gbps", triad}, {"roofline_ms", roofline_ms}, {"tpot_over_roofline", tpot / roofline_ms},
                      {"median_over_roofline", median / roofline_ms}});
    }
  }
  return rows;
}

// Everything a run could trip on is checked before the first (slow) measurement.
void check_before_runs(const BenchArgs& a, const ModelConfig& c) {
  for (const std::string& t : a.kv_dtypes) parse_dtype(t, kInKvPages, "KV dtype");
  for (int ctx : a.decode_at)
    if (ctx + a.decode_steps + 1 > c.max_seq_len && c.learned_positions)
      fail("--decode-at ", ctx, " + ", a.decode_steps + 1, " steps exceed the context of ", c.max_seq_len,
           " of a model with learned positions");
  if (a.sweep) {
    std::ofstream f(a.sweep_out, std::ios::app);
    if (!f) fail(a.sweep_out, ": cannot write the sweep plot there");
  }
}

}  // namespace

json bench_report(const BenchArgs& asked) {
  check_args(asked);
  std::string name;
  std::unique_ptr<Model> m = model_or_preset(asked.model, asked.preset, asked.weights, asked.seed, name, asked.quiet);
  BenchArgs a = asked;  // with --kv-dtype auto resolved by the model's matrices
  a.kv_dtype = dtype_name(kv_dtype_for(asked.kv_dtype, *m));
  const ModelConfig& c = m->cfg;
  check_before_runs(a, c);
  if (!a.decode_at.empty()) {  // the KV-type table alone
    json t = kv_type_table(*m, a);
    return json{{"model", name}, {"kv_types", t}, {"kv_residual", a.kv_residual}, {"threads", ThreadPool::global().size()}};
  }
  std::vector<int> prompt = prompt_ids(a, *m);
  int longest = 1;
  for (int n : a.new_tokens) longest = std::max(longest, n);
  if (static_cast<int>(prompt.size()) + longest > c.max_seq_len)
    fail("prompt (", prompt.size(), ") + new tokens (", longest, ") exceed the context ", c.max_seq_len);

  json j;
  j["model"] = {{"name", name}, {"arch", c.arch},
                {"weights", a.weights.empty() ? dtype_name(m->stored_format) : a.weights}, {"params", m->n_params()}, {"weight_bytes", m->weight_bytes()},
                {"active_weight_bytes", m->active_weight_bytes()},
                {"weight_bytes_by_type", m->weight_bytes_by_type()},
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
  // KV memory in the run's KV type: the formula (page rows: values and any scales), and what the
  // cache allocates (with the f32 window beside quantized rows) for the full context.
  const DType kv_dtype = parse_dtype(a.kv_dtype, kInKvPages, "KV dtype");
  ContiguousKvCache probe(c, c.max_seq_len, kv_dtype, a.kv_residual);  // sizes only: nothing is allocated
  int global_layers = 0;
  for (int w : c.layer_window) global_layers += w == 0 || w >= c.max_seq_len;
  size_t used_tokens = prompt.size() + longest;
  j["kv"] = {{"kv_dtype", dtype_name(kv_dtype)},
             {"residual_tokens", probe.residual()},
             {"bytes_per_token_formula", KvPages::block_bytes(c, 1, kv_dtype)},
             {"formula", KvPages::token_bytes_formula(c, kv_dtype)},
             {"allocated_bytes", probe.bytes_for(c.max_seq_len)},  // what the full context would hold
             {"allocated_for_positions", c.max_seq_len},
             {"allocated_bytes_per_position", static_cast<double>(probe.bytes_for(c.max_seq_len)) / c.max_seq_len},
             {"global_layers", global_layers},
             {"windowed_layers", c.n_layers - global_layers},
             {"tokens_at_longest_run", used_tokens},
             {"bytes_in_use_at_longest_run", probe.bytes_for(static_cast<int>(used_tokens))}};
  if (c.mla()) j["kv"]["expanded_bytes_per_token"] = KvPages::expanded_token_bytes(c, kv_dtype);
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
    // Decode reads every matrix once per token (the embedding only one row) plus the KV so far,
    // in the run's KV type.
    const size_t matrix_bytes = decode_matrix_bytes(*m);
    double triad = measure_triad_gbps();
    json roof{{"triad_gbps", triad}, {"threads", ThreadPool::global().size()}, {"matrix_bytes", matrix_bytes}};
    for (int n : a.new_tokens) {
      const int ctx = static_cast<int>(prompt.size()) + n / 2;  // the decode steps' middle position
      double bytes = static_cast<double>(matrix_bytes + probe.bytes_read_at(ctx));
      double tpot = j["results"]["cache_on"]["tpot_ms"][std::to_string(n)]["mean"].get<double>();
      double gbps = bytes / (tpot / 1000) / 1e9;
      roof["decode"][std::to_string(n)] = {{"bytes_per_token", bytes}, {"gbps", gbps}, {"fraction_of_triad", gbps / triad}};
    }
    double ttft = j["results"]["cache_on"]["ttft_ms"]["mean"].get<double>();
    // 2 FLOP per matrix weight per prompt token (embedding lookups are free).
    size_t matrix_params = m->n_params() - m->pos_emb.size();  // the head's vocab x dim stands in for the table's
    roof["prefill_gflops"] = 2.0 * static_cast<double>(matrix_params) * prompt.size() / (ttft / 1000) / 1e9;
    j["roofline"] = roof;
  }

  return j;
}

}  // namespace kvlm::cli
