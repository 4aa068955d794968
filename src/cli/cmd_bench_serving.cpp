// kvlm bench-serving: what the paged cache buys when serving many sequences:
//  1. aggregate decode tokens/s at several concurrencies (weights read once per step),
//  2. TTFT on a prefix-cache hit against a miss,
//  3. KV memory waste on a mixed-length workload, paged against contiguous-at-max-length;
//  4. with --tier-prefix-tokens: TTFT of a shared prefix cold, and hit from the pool, from the
//     host-memory tier and from the disk tier (a fresh engine on the same directory: a restart).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include <unistd.h>

#include "cli/common.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "model/synthetic.h"

namespace kvlm::cli {

namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct ServingArgs : ModelArgs, KvCodecArgs {
  std::string preset = "distilgpt2";
  std::vector<int> concurrency = {1, 4, 8, 16};
  int prompt_tokens = 32, new_tokens = 64, prefix_tokens = 400, runs = 3, block_size = 16;
  int waste_requests = 32, waste_max_prompt = 512, waste_max_output = 256;
  int tier_prefix_tokens = 0;
  std::string kv_disk_dir;  // "" = a fresh directory under the temporary one, removed after
  bool json = false;
  uint64_t seed = 0;
};

std::vector<int> random_ids(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int> v(n);
  for (int& x : v) x = static_cast<int>(rng() % static_cast<uint64_t>(vocab));
  return v;
}

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Each experiment's engine: the run's block size and KV type (--kv-dtype auto by the model's matrices).
EngineOptions engine_options(const Model& m, const ServingArgs& a) {
  EngineOptions eo;
  eo.block_size = a.block_size;
  eo.kv_dtype = kv_dtype_for(a.kv_dtype, m);
  eo.kv_residual = a.kv_residual;
  return eo;
}

json concurrency_sweep(const Model& m, const ServingArgs& a) {
  json rows = json::array();
  std::mt19937_64 rng(a.seed);
  double base = 0;
  for (int c : a.concurrency) {
    std::vector<double> rates;
    for (int r = 0; r < a.runs; ++r) {
      EngineOptions eo = engine_options(m, a);
      eo.num_blocks = c * ((a.prompt_tokens + a.new_tokens) / a.block_size + 2);
      Engine e(m, eo);
      for (int i = 0; i < c; ++i) e.add({random_ids(rng, a.prompt_tokens, m.cfg.vocab_size), a.new_tokens, {}, false, ""});
      e.step();  // prefill of all prompts (and each first token)
      long before = e.stats().generated_tokens;
      auto t0 = clock_type::now();
      while (e.has_work()) e.step();
      rates.push_back((e.stats().generated_tokens - before) / (ms_since(t0) / 1000.0));
    }
    std::sort(rates.begin(), rates.end());
    double med = rates[rates.size() / 2];
    if (c == a.concurrency.front()) base = med;
    std::fprintf(stderr, "[bench-serving] %2d sequences: %.1f decode tokens/s\n", c, med);
    rows.push_back({{"sequences", c}, {"decode_tokens_per_s", med}, {"vs_first", med / base}});
  }
  return rows;
}

json prefix_ttft(const Model& m, const ServingArgs& a) {
  std::mt19937_64 rng(a.seed + 1);
  std::vector<double> miss, hit;
  for (int r = 0; r < a.runs; ++r) {
    std::vector<int> prefix = random_ids(rng, a.prefix_tokens, m.cfg.vocab_size);
    EngineOptions eo = engine_options(m, a);
    eo.num_blocks = 2 * ((a.prefix_tokens + 32) / a.block_size + 2);
    Engine e(m, eo);
    for (int k = 0; k < 2; ++k) {
      std::vector<int> prompt = prefix;
      for (int x : random_ids(rng, 16, m.cfg.vocab_size)) prompt.push_back(x);
      int id = e.add({prompt, 1, {}, false, ""});
      while (e.has_work()) e.step();
      (k == 0 ? miss : hit).push_back(e.seq(id).ttft_ms);
      if (k == 1 && e.seq(id).reused_tokens == 0) fail("prefix cache missed where it should hit");
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
  };
  std::fprintf(stderr, "[bench-serving] TTFT %d-token shared prefix: miss %.2f ms, hit %.2f ms\n", a.prefix_tokens,
               mean(miss), mean(hit));
  return {{"prefix_tokens", a.prefix_tokens}, {"unique_suffix_tokens", 16}, {"ttft_miss_ms", mean(miss)},
          {"ttft_hit_ms", mean(hit)}, {"speedup", mean(miss) / mean(hit)}};
}

json tier_ttft(const Model& m, const ServingArgs& a) {
  namespace fs = std::filesystem;
  const bool own_dir = a.kv_disk_dir.empty();
  const std::string dir = own_dir ? (fs::temp_directory_path() / ("kvlm-bench-tiers-" + std::to_string(getpid()))).string()
                                  : a.kv_disk_dir;
  std::mt19937_64 rng(a.seed + 3);
  std::vector<double> cold, pool_hit, host_hit, disk_hit;
  const int blocks = (a.tier_prefix_tokens + 64) / a.block_size + 4;
  for (int r = 0; r < a.runs; ++r) {
    fs::remove_all(dir);
    const std::vector<int> prefix = random_ids(rng, a.tier_prefix_tokens, m.cfg.vocab_size);
    auto ttft = [&](Engine& e, std::vector<double>& into, bool must_hit) {
      std::vector<int> prompt = prefix;
      for (int x : random_ids(rng, 16, m.cfg.vocab_size)) prompt.push_back(x);
      const int id = e.add({prompt, 1, {}, false, ""});
      while (e.has_work()) e.step();
      into.push_back(e.seq(id).ttft_ms);
      if (must_hit && e.seq(id).reused_tokens < a.tier_prefix_tokens / a.block_size * a.block_size)
        fail("the shared prefix was not found where it should be (", e.seq(id).reused_tokens, " tokens reused)");
      e.remove(id);
    };
    EngineOptions eo = engine_options(m, a);
    eo.num_blocks = blocks;
    eo.context = a.tier_prefix_tokens + 32;
    eo.tiers.host_capacity = static_cast<size_t>(blocks) * KvPages::block_bytes(m.cfg, a.block_size, eo.kv_dtype);
    eo.tiers.disk_dir = dir;
    eo.tiers.disk_capacity = 2 * eo.tiers.host_capacity + (size_t{1} << 20);
    {
      Engine e(m, eo);
      ttft(e, cold, false);
      ttft(e, pool_hit, true);
      e.evict_cached_prefixes();  // now only the host tier (and the disk) hold the prefix
      ttft(e, host_hit, true);
      e.tiers()->flush();
    }
    eo.tiers.host_capacity = 0;  // a restarted server: an empty pool, the same directory
    Engine restarted(m, eo);
    ttft(restarted, disk_hit, true);
  }
  if (own_dir) fs::remove_all(dir);
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
  };
  std::fprintf(stderr, "[bench-serving] TTFT %d-token prefix: cold %.1f ms, pool %.1f, host %.1f, disk %.1f\n",
               a.tier_prefix_tokens, mean(cold), mean(pool_hit), mean(host_hit), mean(disk_hit));
  return {{"prefix_tokens", a.tier_prefix_tokens}, {"unique_suffix_tokens", 16}, {"ttft_cold_ms", mean(cold)},
          {"ttft_pool_hit_ms", mean(pool_hit)}, {"ttft_host_hit_ms", mean(host_hit)}, {"ttft_disk_hit_ms", mean(disk_hit)},
          {"disk_vs_cold", mean(cold) / mean(disk_hit)}, {"host_vs_pool", mean(host_hit) / mean(pool_hit)}};
}

json waste(const Model& m, const ServingArgs& a) {
  std::mt19937_64 rng(a.seed + 2);
  const int ctx = std::min(m.cfg.max_seq_len, a.waste_max_prompt + a.waste_max_output);
  EngineOptions eo = engine_options(m, a);
  eo.context = ctx;
  eo.num_blocks = a.waste_requests * (ctx / a.block_size + 1);
  eo.prefix_cache = false;
  Engine e(m, eo);
  for (int i = 0; i < a.waste_requests; ++i) {
    int p = 1 + static_cast<int>(rng() % a.waste_max_prompt), o = 1 + static_cast<int>(rng() % a.waste_max_output);
    e.add({random_ids(rng, p, m.cfg.vocab_size), std::min(o, ctx - p), {}, false, ""});
  }
  // Sample the ledger at every step; report the step where the most KV is in use.
  KvLedger peak;
  size_t peak_used = 0, peak_tokens = 0, peak_seqs = 0;
  while (e.has_work()) {
    e.step();
    KvLedger L = e.ledger();
    if (L.private_bytes + L.shared_bytes > peak_used) {
      peak_used = L.private_bytes + L.shared_bytes;
      peak = L;
      peak_tokens = 0;
      for (auto& s : L.seqs) peak_tokens += s.tokens;
      peak_seqs = L.seqs.size();
    }
  }
  // Contiguous mode reserves every live sequence at the maximum length (page rows in the run's KV type).
  const size_t per_token = KvPages::block_bytes(m.cfg, 1, eo.kv_dtype);
  double contiguous_reserved = static_cast<double>(peak_seqs) * ctx * per_token;
  double used = static_cast<double>(peak_tokens) * per_token;
  std::fprintf(stderr, "[bench-serving] waste at peak: paged %.1f%%, contiguous %.1f%%\n", peak.waste_pct(),
               100 * (1 - used / contiguous_reserved));
  return {{"requests", a.waste_requests},      {"max_len", ctx},
          {"live_sequences_at_peak", peak_seqs}, {"tokens_at_peak", peak_tokens},
          {"paged_bytes", peak_used},          {"paged_waste_pct", peak.waste_pct()},
          {"contiguous_bytes", contiguous_reserved}, {"contiguous_waste_pct", 100 * (1 - used / contiguous_reserved)}};
}

int run_serving(const ServingArgs& a) {
  std::string name;
  check_kv_dtype_name(a.kv_dtype);  // before the (slow) model build
  std::unique_ptr<Model> m = model_or_preset(a.model, a.preset, a.weights, a.seed, name);
  // Every cell is checked against the context before any run: no NaN rows, no silent skips.
  const int ctx = m->cfg.max_seq_len;
  if (a.prompt_tokens + a.new_tokens > ctx)
    fail("--prompt-tokens ", a.prompt_tokens, " + --new-tokens ", a.new_tokens, " exceed the model's context of ", ctx);
  if (a.prefix_tokens > 0 && a.prefix_tokens + 17 > ctx)
    fail("--prefix-tokens ", a.prefix_tokens, " + 17 exceed the model's context of ", ctx, " (0 skips the prefix test)");
  if (a.waste_requests > 0 && a.waste_max_prompt >= ctx)
    fail("--waste-max-prompt ", a.waste_max_prompt, " must be below the model's context of ", ctx);
  json j{{"model", name}, {"threads", ThreadPool::global().size()}, {"block_size", a.block_size}, {"runs", a.runs},
         {"kv_dtype", dtype_name(kv_dtype_for(a.kv_dtype, *m))}, {"kv_residual", a.kv_residual}};
  j["concurrency"] = concurrency_sweep(*m, a);
  if (a.prefix_tokens > 0) j["prefix_ttft"] = prefix_ttft(*m, a);
  if (a.waste_requests > 0) j["waste"] = waste(*m, a);
  if (a.tier_prefix_tokens > 0) j["tier_ttft"] = tier_ttft(*m, a);
  if (a.json) {
    std::puts(j.dump(1).c_str());
    return 0;
  }
  std::printf("kvlm bench-serving: %s | %d threads | block size %d | KV %s | median of %d runs\n\n", name.c_str(),
              ThreadPool::global().size(), a.block_size, j["kv_dtype"].get<std::string>().c_str(), a.runs);
  std::printf("%-12s %-22s %s\n", "sequences", "decode tokens/s", "vs first");
  for (auto& r : j["concurrency"])
    std::printf("%-12d %-22.1f %.2fx\n", r["sequences"].get<int>(), r["decode_tokens_per_s"].get<double>(),
                r["vs_first"].get<double>());
  if (j.contains("prefix_ttft")) {
    const json& p = j["prefix_ttft"];
    std::printf("\nTTFT, %d-token shared prefix + 16 new tokens: miss %.2f ms, hit %.2f ms (%.1fx)\n",
                p["prefix_tokens"].get<int>(), p["ttft_miss_ms"].get<double>(), p["ttft_hit_ms"].get<double>(),
                p["speedup"].get<double>());
  }
  if (j.contains("tier_ttft")) {
    const json& t = j["tier_ttft"];
    std::printf("\nTTFT, %d-token shared prefix + 16 new tokens: cold %.1f ms | pool hit %.1f | host hit %.1f | "
                "disk hit %.1f (disk %.1fx faster than cold; host %.2fx the pool's)\n",
                t["prefix_tokens"].get<int>(), t["ttft_cold_ms"].get<double>(), t["ttft_pool_hit_ms"].get<double>(),
                t["ttft_host_hit_ms"].get<double>(), t["ttft_disk_hit_ms"].get<double>(), t["disk_vs_cold"].get<double>(),
                t["host_vs_pool"].get<double>());
  }
  if (j.contains("waste")) {
    const json& w = j["waste"];
    std::printf("\nKV waste, %d requests of mixed lengths (max %d), at peak (%d live sequences, %zu tokens):\n",
                w["requests"].get<int>(), w["max_len"].get<int>(), w["live_sequences_at_peak"].get<int>(),
                w["tokens_at_peak"].get<size_t>());
    std::printf("  paged      %.3f MB, %.1f%% waste\n  contiguous %.3f MB reserved at max length, %.1f%% waste\n",
                w["paged_bytes"].get<size_t>() / 1e6, w["paged_waste_pct"].get<double>(),
                w["contiguous_bytes"].get<double>() / 1e6, w["contiguous_waste_pct"].get<double>());
  }
  return 0;
}

}  // namespace

Runner add_bench_serving(CLI::App& app) {
  auto a = std::make_shared<ServingArgs>();
  CLI::App* sub = app.add_subcommand("bench-serving", "batched decode, prefix-cache TTFT and KV waste");
  sub->add_option("--preset", a->preset, "built-in shape with synthetic weights (default distilgpt2)");
  add_model_options(sub, *a, 0, "or a real model");
  sub->add_option("--concurrency", a->concurrency, "sequence counts (default 1,4,8,16)")->delimiter(',')
      ->check(CLI::Range(1, 4096));
  sub->add_option("--prompt-tokens", a->prompt_tokens, "prompt length for the concurrency sweep (default 32)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--new-tokens", a->new_tokens, "tokens generated per sequence (default 64)")->check(CLI::Range(2, 1 << 20));
  sub->add_option("--prefix-tokens", a->prefix_tokens, "shared prefix for the TTFT test (default 400; 0 skips)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--waste-requests", a->waste_requests, "requests in the waste workload (default 32; 0 skips)")
      ->check(CLI::Range(0, 1 << 16));
  sub->add_option("--waste-max-prompt", a->waste_max_prompt, "longest prompt there (default 512)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--waste-max-output", a->waste_max_output, "longest output there (default 256)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--tier-prefix-tokens", a->tier_prefix_tokens,
                  "shared prefix for the KV tier test: cold, pool, host and disk hits (default 0 skips)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--kv-disk-dir", a->kv_disk_dir, "directory of the disk tier there (default: a temporary one)");
  add_kv_codec_options(sub, *a);
  sub->add_option("--runs", a->runs, "repetitions (default 3)")->check(CLI::Range(1, 1000));
  sub->add_option("--block-size", a->block_size, "tokens per KV block (default 16)")->check(CLI::Range(1, 4096));
  sub->add_option("--seed", a->seed, "seed for weights and token ids");
  sub->add_flag("--json", a->json, "print one JSON object");
  return [a] { return run_serving(*a); };
}

}  // namespace kvlm::cli
