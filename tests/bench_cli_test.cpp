// kvlm bench on a tiny fixture: the JSON carries TTFT/TPOT with and without the cache, KV bytes,
// and the sweep writes a plot. (Speed itself is a benchmark, not a test: see docs/benchmarks.md.)
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kvlm {
namespace {

TEST(BenchCli, JsonHasTheExperimentAndKvBytes) {
  std::string svg = test::temp_path("sweep.svg");
  auto r = test::run_kvlm({"bench", "--model", test::fixtures_dir() + "/gptneo_tiny", "--prompt-ids", "1,2,3,4",
                           "--runs", "2", "--new-tokens", "5,10", "--json", "--sweep", "--sweep-max", "64",
                           "--sweep-points", "4", "--sweep-out", svg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* mode : {"cache_on", "cache_off"}) {
    EXPECT_GT(j["results"][mode]["ttft_ms"]["mean"].get<double>(), 0.0);
    EXPECT_GT(j["results"][mode]["tpot_ms"]["5"]["mean"].get<double>(), 0.0);
    EXPECT_GT(j["results"][mode]["tpot_ms"]["10"]["mean"].get<double>(), 0.0);
  }
  EXPECT_GT(j["speedup"]["tpot_10"].get<double>(), 0.0);
  // 2 layers x 64 kv dims x 2 (K and V) x 4 bytes; the local layer holds only 8 positions.
  EXPECT_EQ(j["kv"]["bytes_per_token_formula"].get<int>(), 2 * 2 * 64 * 4);
  EXPECT_EQ(j["kv"]["allocated_bytes"].get<size_t>(), 2u * (128 + 8) * 64 * 4);
  EXPECT_EQ(j["kv"]["windowed_layers"].get<int>(), 1);
  EXPECT_EQ(j["sweep"].size(), 4u);
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0.0);
  EXPECT_NE(test::read_file(svg).find("<svg"), std::string::npos);
}

// Under --kv-dtype the memory section and the roofline's KV bytes are the codec's page rows plus
// the f32 window, by hand: gptneo_tiny has 2 layers (the second a window of 8) of kv_dim 64 in 4
// heads of 16, so an int8 row is 64 values + 4 f32 scales = 80 bytes.
TEST(BenchCli, KvSectionAndRooflineCountTheRunsKvType) {
  auto r = test::run_kvlm({"bench", "--model", test::fixtures_dir() + "/gptneo_tiny", "--prompt-ids", "1,2,3,4",
                           "--runs", "1", "--warmup", "0", "--new-tokens", "5", "--cache-on-only", "--kv-dtype", "int8",
                           "--kv-residual", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& kv = j["kv"];
  EXPECT_EQ(kv["kv_dtype"], "int8");
  EXPECT_EQ(kv["bytes_per_token_formula"].get<size_t>(), 2u * 2 * 80);
  EXPECT_EQ(kv["formula"], "2 x 2 layers x (64 bytes of int8 values + 4 f32 scales)");
  // int8 rows for 128 + 8 slots, and each layer's 4 newest positions at f32 beside them.
  EXPECT_EQ(kv["allocated_bytes"].get<size_t>(), 2u * (128 + 8) * 80 + 2u * 2 * 4 * 64 * 4);
  // 9 positions after the run: the windowed layer keeps 8.
  EXPECT_EQ(kv["bytes_in_use_at_longest_run"].get<size_t>(), 2u * (9 + 8) * 80 + 2u * 2 * 4 * 64 * 4);
  // The decode steps' middle position is 4 + 5/2 = 6: each layer reads 4 f32 rows and 2 int8 ones.
  const auto& roof = j["roofline"];
  EXPECT_EQ(roof["decode"]["5"]["bytes_per_token"].get<double>() - roof["matrix_bytes"].get<double>(),
            2.0 * 2 * (4 * 64 * 4 + 2 * 80));
}

// The KV-type table: each cell's mean and median step, the host's steal around them, and the
// bytes a step reads by hand: at 64 positions with 16 at f32, the global layer reads 16 f32 rows
// and 48 int8 ones (80 bytes each), the windowed layer its 8 newest, all f32.
TEST(BenchCli, KvTypeTableHasMedianStealAndTheBytesRead) {
  auto r = test::run_kvlm({"bench", "--model", test::fixtures_dir() + "/gptneo_tiny", "--decode-at", "64",
                           "--kv-dtypes", "f32,int8", "--kv-residual", "16", "--decode-steps", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto t = nlohmann::json::parse(r.out)["kv_types"];
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0]["kv_bytes"].get<size_t>(), 2u * (64 + 8) * 64 * 4);
  EXPECT_EQ(t[1]["kv_bytes"].get<size_t>(), 2u * (16 * 256 + 48 * 80) + 2u * 8 * 256);
  for (const auto& c : t) {
    const double mean = c["tpot_ms"].get<double>(), median = c["tpot_median_ms"].get<double>();
    EXPECT_GT(median, 0.0);
    EXPECT_LE(median, 3 * mean);  // three steps: the median is at most their sum
    EXPECT_NEAR(c["median_over_roofline"].get<double>(), median / c["roofline_ms"].get<double>(), 1e-9);
    ASSERT_TRUE(c["host_steal_pct"].is_number()) << c.dump();  // Linux's /proc/stat has it
    EXPECT_GE(c["host_steal_pct"].get<double>(), 0.0);
  }
}

TEST(BenchCli, BadArgumentsAreErrors) {
  auto r = test::run_kvlm({"bench", "--preset", "nope"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown preset"), std::string::npos) << r.err;
  r = test::run_kvlm({"bench", "--model", test::fixtures_dir() + "/gpt2_tiny", "--prompt-ids", "1", "--new-tokens",
                      "500", "--runs", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exceed the context"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
