// The KV-cache experiment behind `kvlm bench` and `kvlm.bench()` in Python: TTFT and TPOT with
// the cache on and off, the cache's memory, the bandwidth roofline, a context sweep, or decode per
// KV type. bench_report() measures and returns the JSON that `kvlm bench --json` prints.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/options.h"

namespace kvlm::cli {

struct BenchArgs : ModelArgs, KvCodecArgs {
  std::string preset = "distilgpt2", prompt = "What is KV caching?", prompt_ids, sweep_out = "kv_sweep.svg";
  int prompt_tokens = 0, runs = 10, warmup = 1, sweep_max = 1024, sweep_points = 16;
  std::vector<int> new_tokens = {20, 100};
  int decode_steps = 16;
  std::vector<int> decode_at;                 // contexts for the KV-type table
  std::vector<std::string> kv_dtypes = {"f32", "f16", "bf16", "int8", "int4"};
  bool json = false, sweep = false, cache_on_only = false, no_roofline = false;
  bool quiet = false;  // no progress lines on stderr (the Python package)
  uint64_t seed = 0;
};

// The arguments' ranges: the CLI's parser checks them, and bench_report() again for callers that
// bypass it (Python). One table, so the two cannot drift apart.
struct IntRange {
  int lo, hi;
};
inline constexpr IntRange kBenchPromptTokens{1, 1 << 24};  // 0 (unset) is allowed as well
inline constexpr IntRange kBenchNewTokens{2, 1 << 20};
inline constexpr IntRange kBenchRuns{1, 100000};
inline constexpr IntRange kBenchWarmup{0, 1000};
inline constexpr IntRange kBenchKvResidual{0, 1 << 24};
inline constexpr IntRange kBenchDecodeAt{1, 1 << 20};
inline constexpr IntRange kBenchDecodeSteps{1, 100000};
inline constexpr IntRange kBenchSweepMax{32, 1 << 20};
inline constexpr IntRange kBenchSweepPoints{2, 1000};

// Checks the arguments against those ranges, runs, returns the report.
nlohmann::json bench_report(const BenchArgs& a);

}  // namespace kvlm::cli
