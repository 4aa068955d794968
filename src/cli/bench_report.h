// The KV-cache experiment behind `kvlm bench` and `kvlm.bench()` in Python: TTFT and TPOT with
// the cache on and off, the cache's memory, the bandwidth roofline, a context sweep, or decode per
// KV type. bench_report() measures and returns the JSON that `kvlm bench --json` prints.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvlm::cli {

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
  bool quiet = false;  // no progress lines on stderr (the Python package)
  uint64_t seed = 0;
};

// Checks the arguments (the CLI's ranges, for callers that bypass it), runs, returns the report.
nlohmann::json bench_report(const BenchArgs& a);

}  // namespace kvlm::cli
