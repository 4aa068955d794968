// Attention sinks (StreamingLLM): the cache never holds more than sinks + window positions,
// re-rotated keys equal keys computed at their new positions, and generation runs to 10x the
// model's context with finite logits.
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/forward.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/sink_cache.h"
#include "test_support.h"

namespace kvlm {
namespace {

// Re-rotation: after evictions, every kept first-layer key must equal the key computed fresh at
// its new cache position (deeper layers legitimately differ: their K/V were computed while the
// evicted tokens were still in context, as in StreamingLLM). Before any eviction, logits equal
// the contiguous cache's.
TEST(SinkCache, ReRotatedKeysEqualKeysComputedAtTheirNewPositions) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");  // rotate-half RoPE with llama3 scaling, GQA
  const int sinks = 2, window = 6;
  SinkKvCache sc(m->cfg, m->rope, sinks, window);
  ContiguousKvCache plain(m->cfg, 64);
  std::vector<int> all;
  std::vector<float> got, want;
  const int kv_dim = m->cfg.kv_dim();
  for (int t = 0; t < 30; ++t) {
    int tok = (t * 37 + 5) % 256;
    all.push_back(tok);
    forward(*m, sc, &tok, 1, LogitsFor::Last, got);
    forward(*m, plain, &tok, 1, LogitsFor::Last, want);
    ASSERT_LE(sc.length(), sinks + window);
    if (t < sinks + window) {
      EXPECT_EQ(test::max_abs_diff(got, want), 0.0f) << "step " << t;
    }
    std::vector<int> kept(all.begin(), all.begin() + std::min<int>(sinks, all.size()));
    int tail = std::min<int>(static_cast<int>(all.size()) - static_cast<int>(kept.size()), window);
    kept.insert(kept.end(), all.end() - tail, all.end());
    ContiguousKvCache fresh(m->cfg, static_cast<int>(kept.size()));
    forward(*m, fresh, kept.data(), static_cast<int>(kept.size()), LogitsFor::Last, want);
    ASSERT_EQ(sc.length(), static_cast<int>(kept.size()));
    for (int j = 0; j < sc.length(); ++j) {
      std::vector<float> a(sc.key(0, j), sc.key(0, j) + kv_dim), b(fresh.key(0, j), fresh.key(0, j) + kv_dim);
      EXPECT_LE(test::max_abs_diff(a, b), 1e-5f) << "step " << t << " slot " << j;
      std::vector<float> va(sc.value(0, j), sc.value(0, j) + kv_dim), vb(fresh.value(0, j), fresh.value(0, j) + kv_dim);
      EXPECT_EQ(test::max_abs_diff(va, vb), 0.0f) << "step " << t << " slot " << j;
    }
  }
  EXPECT_EQ(sc.evicted(), 30 - sinks - window);
}

TEST(SinkCache, TenTimesTheContextWithBoundedMemoryAndFiniteLogits) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "attention sinks on stories260K past its context");
  auto m = load_model(test::shared_path("models/stories260K/stories260K.bin"));
  const int ctx = m->cfg.max_seq_len;  // 512
  SinkKvCache sc(m->cfg, m->rope, 4, 124);
  const size_t bytes = sc.bytes_allocated();
  std::vector<float> logits;
  int tok = 1;
  for (int t = 0; t < 10 * ctx; ++t) {
    forward(*m, sc, &tok, 1, LogitsFor::Last, logits);
    ASSERT_LE(sc.length(), 128);
    ASSERT_EQ(sc.bytes_allocated(), bytes);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << "step " << t;
    tok = Sampler::argmax(logits.data(), m->cfg.vocab_size);
  }
  EXPECT_EQ(sc.evicted(), 10 * ctx - 128);
  // Through the generator too, and the CLI refuses what it cannot do.
  GenerateOptions opt;
  opt.max_new_tokens = 3 * ctx;
  opt.stop_at_eos = false;
  opt.sink_tokens = 4;
  opt.window = 60;
  EXPECT_EQ(generate(*m, {1, 403, 407, 261, 378}, opt).generated.size(), static_cast<size_t>(3 * ctx));
  auto r = test::run_kvlm({"generate", "--model", test::fixtures_dir() + "/gpt2_tiny", "--tokenizer",
                           test::fixtures_dir() + "/tokenizers/bytelevel_tiny/tokenizer.json", "--prompt", "hi",
                           "--kv-layout", "contiguous", "--window", "8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("RoPE"), std::string::npos) << r.err;
}

// The CLI streams in either layout, with the same tokens: the paged one goes through the engine.
TEST(SinkCache, GenerateGivesTheSameTokensPagedAndContiguous) {
  KVLM_NEED_SHARED("models/stories260K/stories260K.bin", "attention sinks through kvlm generate");
  const std::string dir = test::shared_path("models/stories260K");
  std::vector<std::string> ids[2];
  const char* layouts[2] = {"contiguous", "paged"};
  for (int i = 0; i < 2; ++i) {
    auto r = test::run_kvlm({"generate", "--model", dir + "/stories260K.bin", "--tokenizer", dir + "/tok512.bin", "--prompt",
                             "Once upon a time", "--max-new-tokens", "700", "--ignore-eos", "--window", "40",
                             "--sink-tokens", "4", "--kv-layout", layouts[i], "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["generated_ids"].size(), 700u);  // past the 512-token context
    EXPECT_EQ(j["finish_reason"], "length");
    ids[i].push_back(j["generated_ids"].dump());
  }
  EXPECT_EQ(ids[0], ids[1]);
  auto r = test::run_kvlm({"generate", "--model", dir + "/stories260K.bin", "--tokenizer", dir + "/tok512.bin", "--prompt",
                           "Once", "--window", "40", "--kv-dtype", "int8"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("f32 KV pages"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
