// The paged-cache CLI: generate in every KV layout agrees, --parallel and --kv-stats report,
// kv-plan answers before loading weights, batch reports throughput and prefix hits.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "test_support.h"

namespace kvlm {
namespace {

using nlohmann::json;

TEST(EngineCli, EveryKvLayoutGivesTheSameTokens) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "generate across KV layouts");
  std::string model = test::shared_path("models/stories260K/stories260K.bin");
  std::vector<int> want;
  for (std::vector<std::string> extra : {std::vector<std::string>{"--kv-layout", "contiguous"},
                                         std::vector<std::string>{"--no-kv-cache"},
                                         std::vector<std::string>{"--block-size", "3", "--kv-stats"},
                                         std::vector<std::string>{}}) {
    std::vector<std::string> args = {"generate", "--model", model, "--prompt", "Once upon a time", "--max-new-tokens",
                                     "40", "--json", "--ignore-eos"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_kvlm(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    auto ids = j["generated_ids"].get<std::vector<int>>();
    EXPECT_EQ(ids.size(), 40u);
    if (want.empty()) want = ids;
    EXPECT_EQ(ids, want) << j["kv_cache"];
    if (j.contains("kv_ledger")) {
      const json& L = j["kv_ledger"];
      EXPECT_EQ(L["private_bytes"].get<size_t>() + L["shared_bytes"].get<size_t>() + L["cached_bytes"].get<size_t>() +
                    L["free_bytes"].get<size_t>(),
                L["capacity_bytes"].get<size_t>());
      EXPECT_EQ(L["block_size"].get<int>(), 3);
    }
  }
}

TEST(EngineCli, ParallelSamplesShareThePrompt) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "generate --parallel");
  auto r = test::run_kvlm({"generate", "--model", test::shared_path("models/stories260K/stories260K.bin"), "--prompt",
                           "Once upon a time there was a big dog named Max and a small cat", "--max-new-tokens", "20",
                           "--parallel", "4", "--temperature", "1.0", "--seed", "3", "--block-size", "4", "--json",
                           "--kv-stats", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["samples"].size(), 4u);
  std::set<std::vector<int>> distinct;
  for (auto& s : j["samples"]) distinct.insert(s["generated_ids"].get<std::vector<int>>());
  EXPECT_GT(distinct.size(), 1u);
  EXPECT_GT(j["kv_ledger"]["shared_bytes"].get<size_t>(), 0u) << "forks must share the prompt's blocks";
}

TEST(EngineCli, KvPlanAnswersFromTheConfig) {
  auto r = test::run_kvlm({"kv-plan", "--model", test::fixtures_dir() + "/llama_tiny", "--ctx", "100", "--batch", "3",
                           "--block-size", "16", "--memory-gb", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["kv_bytes_per_token"].get<size_t>(), 2u * 2 * 2 * 16 * 4);  // 2 layers, 2 kv heads, head_dim 16
  EXPECT_EQ(j["blocks_per_sequence"].get<int>(), 7);
  EXPECT_EQ(j["kv_bytes"].get<size_t>(), 7u * 3 * 16 * 512);
  EXPECT_TRUE(j["fits"].get<bool>());
  r = test::run_kvlm({"kv-plan", "--preset", "tinyllama-1.1b", "--ctx", "2048", "--batch", "64", "--memory-gb", "8",
                      "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(json::parse(r.out)["fits"].get<bool>());
}

// kv-plan with a KV type plans what the engine then allocates: its pages' bytes per block and
// the f32 window beside them, as the ledger of a real run reports them.
TEST(EngineCli, KvPlanPlansEachKvTypeAsTheEngineAllocates) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "kv-plan against a run's ledger");
  const std::string model = test::shared_path("models/stories260K/stories260K.bin");
  for (const char* t : {"f32", "f16", "bf16", "int8", "int4"}) {
    SCOPED_TRACE(t);
    auto run = test::run_kvlm({"generate", "--model", model, "--prompt", "Once upon a time", "--max-new-tokens", "40",
                               "--ignore-eos", "--kv-dtype", t, "--kv-residual", "16", "--kv-stats", "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const json ledger = json::parse(run.out)["kv_ledger"];
    const int tokens = ledger["sequences"][0]["tokens"].get<int>();
    auto plan = test::run_kvlm({"kv-plan", "--model", model, "--ctx", std::to_string(tokens), "--kv-dtype", t,
                                "--kv-residual", "16", "--json"});
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    const json j = json::parse(plan.out);
    EXPECT_EQ(j["kv_dtype"].get<std::string>(), t);
    EXPECT_EQ(j["bytes_per_block"].get<double>(), ledger["bytes_per_block"].get<double>());
    EXPECT_EQ(j["blocks_per_sequence"].get<int>(), ledger["sequences"][0]["blocks"].get<int>());
    EXPECT_EQ(j["residual_bytes_per_sequence"].get<double>(), ledger["residual_bytes"].get<double>());
    EXPECT_EQ(j["kv_bytes"].get<double>(),
              ledger["capacity_bytes"].get<double>() + ledger["residual_bytes"].get<double>());
  }
  auto bad = test::run_kvlm({"kv-plan", "--preset", "gpt2", "--kv-dtype", "int3"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown KV dtype 'int3'"), std::string::npos) << bad.err;
}

TEST(EngineCli, BatchReportsThroughputAndPrefixHits) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "kvlm batch");
  std::string prompts = test::temp_path("prompts.txt");
  test::write_file(prompts, "Once upon a time\nThe dog ran to the park\nOnce upon a time, a cat\n");
  auto r = test::run_kvlm({"batch", "--model", test::shared_path("models/stories260K/stories260K.bin"), "--prompts",
                           prompts, "--max-new-tokens", "16", "--block-size", "2", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["sequences"].get<int>(), 3);
  EXPECT_EQ(j["generated_tokens"].get<int>(), 48);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GE(j["prefix_cache_hit_rate"].get<double>(), 0.0);
}

TEST(EngineCli, QuantizedPagesGiveTheContiguousQuantizedTokens) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "generate with quantized pages");
  std::string model = test::shared_path("models/stories260K/stories260K.bin");
  std::vector<int> want;
  for (std::string layout : {"contiguous", "paged"}) {
    // int8 stories260K: 2 x 5 layers x (32 values + 4 head scales x 4 B) = 480 B per token.
    auto r = test::run_kvlm({"generate", "--model", model, "--prompt", "Once upon a time", "--max-new-tokens", "40",
                             "--json", "--ignore-eos", "--kv-dtype", "int8", "--kv-residual", "8", "--kv-layout", layout,
                             "--kv-capacity", "0.1MB", "--kv-stats"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out);
    auto ids = j["generated_ids"].get<std::vector<int>>();
    if (want.empty()) want = ids;
    EXPECT_EQ(ids, want) << layout;
    if (layout == "paged") {
      EXPECT_EQ(j["kv_ledger"]["page_dtype"], "int8");
      EXPECT_EQ(j["kv_ledger"]["bytes_per_block"].get<size_t>(), 480u * 16);
      EXPECT_EQ(j["kv_ledger"]["num_blocks"].get<int>(), 13);  // 100000 / 7680
    }
  }
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {

// --kv-dtype auto, the default: f32 KV beside matrices given in f32, f16 beside any other (half,
// bf16 or quantized), as the file stores them or --weights asks. Every command resolves it alike,
// kv-plan from the files' headers alone.
TEST(EngineCli, KvDtypeAutoFollowsTheMatrices) {
  const std::string fx = test::fixtures_dir();
  auto plan = [](std::vector<std::string> args) {
    args.insert(args.begin(), "kv-plan");
    args.push_back("--json");
    auto r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? json::parse(r.out) : json::object();
  };
  EXPECT_EQ(plan({"--model", fx + "/llama_tiny"})["kv_dtype"], "f32");
  EXPECT_EQ(plan({"--model", fx + "/llama_tiny/model-F32.gguf"})["kv_dtype"], "f32");
  EXPECT_EQ(plan({"--model", fx + "/llama_f16"})["kv_dtype"], "f16");
  EXPECT_EQ(plan({"--model", fx + "/llama_f16/model-F16.gguf"})["kv_dtype"], "f16");
  EXPECT_EQ(plan({"--preset", "gpt2"})["kv_dtype"], "f32");  // synthetic f32 matrices
  // A config alone (planning before a download), or beside a shard still downloading: the dtype it names.
  for (auto [fixture, want] : std::vector<std::pair<std::string, std::string>>{{"llama_tiny", "f32"}, {"llama_f16", "f16"}}) {
    const std::string dir = test::temp_path("config_only_" + fixture);
    std::filesystem::create_directories(dir);
    test::write_file(dir + "/config.json", test::read_file(fx + "/" + fixture + "/config.json"));
    EXPECT_EQ(plan({"--model", dir})["kv_dtype"], want) << fixture;
    test::write_file(dir + "/model-00001-of-00002.safetensors", "partial");
    EXPECT_EQ(plan({"--model", dir})["kv_dtype"], want) << fixture << " beside a partial shard";
  }
  const json q8 = plan({"--model", fx + "/llama_tiny/model-Q8_0.gguf"});
  EXPECT_EQ(q8["kv_dtype"], "f16");
  EXPECT_EQ(q8["kv_bytes_per_token"].get<double>(), 2.0 * 2 * 2 * 16 * 2);  // K and V, 2 layers, 2 KV heads of 16, 2 B
  EXPECT_EQ(plan({"--model", fx + "/llama_tiny/model-Q8_0.gguf", "--kv-dtype", "int8"})["kv_dtype"], "int8");
  EXPECT_EQ(plan({"--model", fx + "/llama_tiny/model-Q8_0.gguf", "--kv-dtype", "f32"})["kv_dtype"], "f32");

  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "--kv-dtype auto in generate, batch, bench, bench-serving");
  const std::string model = test::shared_path("models/stories260K/stories260K.bin");
  const std::string prompts = test::temp_path("auto_prompts.txt");
  test::write_file(prompts, "Once upon a time\n");
  for (auto [weights, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "f32"}, {"f32", "f32"}, {"q8_0", "f16"}, {"q4_0", "f16"}, {"bf16", "f16"}, {"f16", "f16"}}) {
    SCOPED_TRACE("--weights '" + weights + "'");
    std::vector<std::string> w;
    if (!weights.empty()) w = {"--weights", weights};
    auto with = [&](std::vector<std::string> args) {
      args.insert(args.end(), w.begin(), w.end());
      auto r = test::run_kvlm(args);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return r.exit_code == 0 ? json::parse(r.out) : json::object();
    };
    const json gen = with({"generate", "--model", model, "--prompt", "Once", "--max-new-tokens", "3", "--kv-stats", "--json"});
    EXPECT_EQ(gen["kv_ledger"]["page_dtype"], want);
    EXPECT_EQ(gen["kv_dtype"], want);
    EXPECT_EQ(with({"generate", "--model", model, "--prompt", "Once", "--max-new-tokens", "3", "--kv-layout", "contiguous",
                    "--json"})["kv_dtype"], want);
    EXPECT_EQ(with({"batch", "--model", model, "--prompts", prompts, "--max-new-tokens", "3", "--json"})["kv_dtype"], want);
    EXPECT_EQ(with({"bench", "--model", model, "--prompt", "Once upon a time", "--new-tokens", "2", "--runs", "1",
                    "--warmup", "0", "--cache-on-only", "--no-roofline", "--json"})["kv"]["kv_dtype"], want);
    EXPECT_EQ(with({"bench-serving", "--model", model, "--concurrency", "1", "--runs", "1", "--prompt-tokens", "4",
                    "--new-tokens", "2", "--prefix-tokens", "0", "--waste-requests", "0", "--json"})["kv_dtype"], want);
  }
  // ppl is windowed prefill (f32 attention whatever the KV type): under auto it stays plain
  // perplexity, and only a KV type named runs the token-by-token comparison.
  const std::string text = test::temp_path("auto_ppl.txt");
  test::write_file(text, "Once upon a time there was a little girl. She liked to play in the park with her dog.\n");
  auto ppl = test::run_kvlm({"ppl", "--model", model, "--weights", "q8_0", "--text", text, "--json"});
  ASSERT_EQ(ppl.exit_code, 0) << ppl.err;
  EXPECT_TRUE(json::parse(ppl.out).contains("mean_nll")) << ppl.out;
  EXPECT_FALSE(json::parse(ppl.out).contains("kld_mean")) << ppl.out;
  ppl = test::run_kvlm({"ppl", "--model", model, "--weights", "q8_0", "--text", text, "--kv-dtype", "f16", "--json"});
  ASSERT_EQ(ppl.exit_code, 0) << ppl.err;
  EXPECT_EQ(json::parse(ppl.out)["kv_dtype"], "f16");
  EXPECT_TRUE(json::parse(ppl.out).contains("kld_mean")) << ppl.out;

  // Attention sinks move and re-rotate f32 rows: there auto is f32 whatever the matrices.
  auto sinks = test::run_kvlm({"generate", "--model", model, "--weights", "q8_0", "--prompt", "Once upon a time",
                               "--max-new-tokens", "20", "--sink-tokens", "2", "--window", "8", "--kv-stats", "--json"});
  ASSERT_EQ(sinks.exit_code, 0) << sinks.err;
  EXPECT_EQ(json::parse(sinks.out)["kv_ledger"]["page_dtype"], "f32");
  sinks = test::run_kvlm({"batch", "--model", model, "--weights", "q8_0", "--prompts", prompts, "--max-new-tokens", "20",
                          "--sink-tokens", "2", "--window", "8", "--json"});
  ASSERT_EQ(sinks.exit_code, 0) << sinks.err;
  EXPECT_EQ(json::parse(sinks.out)["kv_dtype"], "f32");
  auto bad = test::run_kvlm({"generate", "--model", model, "--prompt", "Once", "--kv-dtype", "fp8"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown KV dtype 'fp8' (known: auto, f32, f16, bf16, int8, int4)"), std::string::npos) << bad.err;
}

TEST(EngineCli, KvCapacityInTokensOrBytes) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "--kv-capacity");
  std::string model = test::shared_path("models/stories260K/stories260K.bin");
  // stories260K: 1280 bytes per token, so a 16-token block is 20480 bytes.
  for (auto [spec, blocks] : std::vector<std::pair<std::string, int>>{{"64tok", 4}, {"100", 7}, {"0.1MB", 4}}) {
    auto r = test::run_kvlm({"generate", "--model", model, "--prompt", "Once", "--max-new-tokens", "8", "--kv-capacity",
                             spec, "--kv-stats", "--json"});
    ASSERT_EQ(r.exit_code, 0) << spec << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["kv_ledger"]["num_blocks"].get<int>(), blocks) << spec;
  }
  auto r = test::run_kvlm({"generate", "--model", model, "--prompt", "Once", "--kv-capacity", "12XB"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown unit"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
