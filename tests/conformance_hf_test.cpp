// Tiny random HF models (tests/fixtures, made by tools/make_fixtures.py with transformers):
// kvlm's logits and greedy tokens against Hugging Face's own, with the cache on and off.
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "test_support.h"

namespace kvlm {
namespace {

using nlohmann::json;

class HfConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(HfConformance, LogitsAndGreedyMatchTransformers) {
  std::string dir = test::fixtures_dir() + "/" + GetParam();
  json e = json::parse(test::read_file(dir + "/expected.json"));
  std::vector<int> prompt = e["prompt_ids"].get<std::vector<int>>();
  std::vector<int> greedy = e["greedy_ids"].get<std::vector<int>>();
  std::vector<float> want = test::read_f32(dir + "/logits.f32");
  auto m = load_model(dir);
  std::vector<int> seq = prompt;
  seq.insert(seq.end(), greedy.begin(), greedy.end());
  const int n = static_cast<int>(seq.size());

  // Prefill path: all positions in one forward.
  ContiguousKvCache c1(m->cfg, n);
  std::vector<float> got;
  forward(*m, c1, seq.data(), n, LogitsFor::All, got);
  EXPECT_LE(test::max_abs_diff(got, want), 1e-4f) << "prefill";

  // Decode path: one token per forward through the cache (ring buffers for local layers).
  ContiguousKvCache c2(m->cfg, n);
  std::vector<float> step, all;
  for (int t = 0; t < n; ++t) {
    forward(*m, c2, &seq[t], 1, LogitsFor::Last, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  EXPECT_LE(test::max_abs_diff(all, want), 1e-4f) << "decode";
  EXPECT_LE(test::max_abs_diff(all, got), 1e-5f) << "cache vs prefill";

  for (bool cache : {true, false}) {
    GenerateOptions opt;
    opt.max_new_tokens = static_cast<int>(greedy.size());
    opt.use_kv_cache = cache;
    opt.stop_at_eos = false;
    EXPECT_EQ(generate(*m, prompt, opt).generated, greedy) << (cache ? "cache on" : "cache off");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfConformance, ::testing::Values("gpt2_tiny", "gptneo_tiny"));

TEST(GptNeoWindow, LocalLayersKeepOnlyTheWindow) {
  auto m = load_model(test::fixtures_dir() + "/gptneo_tiny");
  ASSERT_EQ(m->cfg.layer_window, (std::vector<int>{0, 8, 0, 8}));
  ContiguousKvCache c(m->cfg, 100);
  EXPECT_EQ(c.layer_slots(0), 100);
  EXPECT_EQ(c.layer_slots(1), 8);
  EXPECT_EQ(c.bytes_allocated(), 2u * (100 + 8 + 100 + 8) * m->cfg.kv_dim() * sizeof(float));
}

}  // namespace
}  // namespace kvlm
