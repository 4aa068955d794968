// Smaller pages (issue 7) in the paged pool: quantized pages give exactly the logits of the
// contiguous quantized cache (same codec, same full-precision window), share and fork like f32
// pages, and shrink the pool by the stated ratio; with sliding-window layers, blocks that left
// the window go back to the pool at once, memory stays constant, and logits still match HF.
#include <nlohmann/json.hpp>
#include <functional>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "kv/block_pool.h"
#include "kv/ledger.h"
#include "kv/paged_cache.h"
#include "test_support.h"

namespace kvlm {
namespace {

using nlohmann::json;

std::vector<float> stepwise_logits(const Model& m, KvCache& kv, const std::vector<int>& ids,
                                   const std::function<void(int)>& after_step = {}) {
  std::vector<float> all, row;
  for (size_t i = 0; i < ids.size(); ++i) {
    forward(m, kv, &ids[i], 1, LogitsFor::Last, row);
    all.insert(all.end(), row.begin(), row.end());
    if (after_step) after_step(static_cast<int>(i));
  }
  return all;
}

std::vector<int> fixture_ids(const std::string& dir) {
  json e = json::parse(test::read_file(dir + "/expected.json"));
  std::vector<int> ids = e["prompt_ids"].get<std::vector<int>>();
  for (int t : e["greedy_ids"].get<std::vector<int>>()) ids.push_back(t);
  return ids;
}

void expect_pages_equal_contiguous(const Model& m, const std::vector<int>& ids, const std::string& what) {
  const int n = static_cast<int>(ids.size());
  for (DType t : {DType::F16, DType::BF16, DType::Int8, DType::Int4})
    for (int residual : {0, 5}) {
      ContiguousKvCache contiguous(m.cfg, n, t, residual);
      std::vector<float> want = stepwise_logits(m, contiguous, ids);
      for (int bs : {3, 16}) {
        KvPages pages(m.cfg, bs, n / bs + 4, t);
        BlockPool pool(pages);
        PagedKvCache paged(pages, pool, n, "", residual);
        std::vector<float> got = stepwise_logits(m, paged, ids);
        EXPECT_EQ(test::max_abs_diff(got, want), 0.0f)
            << what << " " << dtype_name(t) << " residual " << residual << " block size " << bs;
      }
    }
}

TEST(QuantizedPages, EqualTheContiguousQuantizedCacheOnFixtures) {
  for (const char* f : {"llama_tiny", "mistral_tiny", "qwen2_tiny", "gpt2_tiny", "mixtral_tiny", "gptoss_tiny",
                        "deepseek3_tiny"}) {
    std::string dir = test::fixtures_dir() + "/" + f;
    expect_pages_equal_contiguous(*load_model(dir), fixture_ids(dir), f);
  }
}

TEST(QuantizedPages, EqualTheContiguousQuantizedCacheOnStories260K) {
  KVLM_NEED_SHARED("golden/stories260K/logits_long_prompt_mia.f32", "quantized pages on stories260K");
  json side = json::parse(test::read_file(test::shared_path("golden/stories260K/logits_long_prompt_mia.json")));
  auto m = load_model(test::shared_path("models/stories260K/stories260K.bin"));
  std::vector<int> ids = side["token_ids"].get<std::vector<int>>();
  expect_pages_equal_contiguous(*m, ids, "stories260K");
  // And int8 pages against llama2.c's f32 logits: the tolerance the contiguous cache states.
  std::vector<float> golden = test::read_f32(test::shared_path("golden/stories260K/logits_long_prompt_mia.f32"));
  KvPages pages(m->cfg, 16, 64, DType::Int8);
  BlockPool pool(pages);
  PagedKvCache paged(pages, pool, static_cast<int>(ids.size()), "", 0);
  EXPECT_LE(test::max_abs_diff(stepwise_logits(*m, paged, ids), golden), 1.0f);
}

TEST(QuantizedPages, PageBytesShrinkByTheCodecRatio) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  const ModelConfig& c = m->cfg;  // kv_dim 32, head_dim 16
  const size_t f32 = KvPages::block_bytes(c, 16, DType::F32);
  EXPECT_EQ(f32, 2ull * c.n_layers * 16 * c.kv_dim() * 4);
  EXPECT_EQ(KvPages::block_bytes(c, 16, DType::F16), f32 / 2);
  EXPECT_EQ(KvPages::block_bytes(c, 16, DType::BF16), f32 / 2);
  // int8: one byte per value plus an f32 scale per head per token.
  EXPECT_EQ(KvPages::block_bytes(c, 16, DType::Int8),
            2ull * c.n_layers * 16 * (c.kv_dim() + 4 * c.n_kv_heads));
  // int4: half a byte per value plus an f32 scale and zero point per group of 32.
  EXPECT_EQ(KvPages::block_bytes(c, 16, DType::Int4),
            2ull * c.n_layers * 16 * (c.kv_dim() / 2 + 8 * (c.kv_dim() / 32)));
}

using test::drain;
using test::generated;

TEST(QuantizedPages, PrefixSharingAndForksWorkOnQuantizedPages) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  std::vector<int> prompt = fixture_ids(test::fixtures_dir() + "/llama_tiny");
  prompt.resize(21);
  for (DType t : {DType::Int8, DType::Int4}) {
    EngineOptions o;
    o.block_size = 4;
    o.num_blocks = 64;
    o.kv_dtype = t;
    o.kv_residual = 0;  // adopted rows exist only as pages, so with no f32 window runs agree exactly
    Engine e(*m, o);
    int a = e.add({prompt, 12, {}, false, ""});
    drain(e);
    int b = e.add({prompt, 12, {}, false, ""});
    drain(e);
    EXPECT_EQ(e.seq(b).reused_tokens, 20) << dtype_name(t);
    EXPECT_EQ(generated(e, b), generated(e, a)) << dtype_name(t);
    // A fork shares every page, copies the one it writes into, and continues like its parent.
    int c = e.add({prompt, 12, {}, false, ""});
    e.step();
    int d = e.fork(c, 1);
    drain(e);
    EXPECT_EQ(generated(e, c), generated(e, a)) << dtype_name(t);
    EXPECT_EQ(generated(e, d), generated(e, a)) << dtype_name(t);
    e.pool().check_invariants();
  }
}

TEST(QuantizedPages, LedgerRecordsPagePrecisionAndTheF32Window) {
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");
  std::vector<int> prompt = fixture_ids(test::fixtures_dir() + "/llama_tiny");
  EngineOptions o;
  o.block_size = 8;
  o.num_blocks = 32;
  o.kv_dtype = DType::Int4;
  o.kv_residual = 16;
  Engine e(*m, o);
  e.add({prompt, 4, {}, false, ""});
  e.step();
  KvLedger L = e.ledger();
  EXPECT_EQ(L.page_dtype, "int4");
  ASSERT_EQ(L.seqs.size(), 1u);
  EXPECT_EQ(L.seqs[0].residual_tokens, 16);
  EXPECT_EQ(L.seqs[0].residual_bytes, 2ull * m->cfg.n_layers * 16 * m->cfg.kv_dim() * 4);
  EXPECT_EQ(L.private_bytes + L.shared_bytes + L.cached_bytes + L.free_bytes, L.capacity_bytes);
  EXPECT_NE(L.to_text().find("int4 pages"), std::string::npos) << L.to_text();
}

// Mistral's layers all use a window of 8: a position older than p - 7 is never read again.
TEST(SlidingWindowPages, MistralFreesBlocksAtOnceAndMatchesHf) {
  const std::string dir = test::fixtures_dir() + "/mistral_tiny";
  auto m = load_model(dir);
  ASSERT_EQ(m->cfg.layer_window[0], 8);
  std::vector<int> ids = fixture_ids(dir);
  std::vector<float> hf = test::read_f32(dir + "/logits.f32");
  for (DType t : {DType::F32, DType::Int8}) {
    KvPages pages(m->cfg, 4, 32, t);
    BlockPool pool(pages);
    ASSERT_EQ(pages.window(), 8);
    PagedKvCache paged(pages, pool, static_cast<int>(ids.size()), "", 4);
    int most_live = 0;
    std::vector<float> got = stepwise_logits(*m, paged, ids, [&](int step) {
      // 8 positions span at most 3 blocks of 4; nothing else is held.
      if (step >= 8) most_live = std::max(most_live, paged.live_blocks());
      EXPECT_EQ(pool.num_blocks() - pool.num_free(), paged.live_blocks());
    });
    EXPECT_LE(most_live, 3) << dtype_name(t);
    EXPECT_GE(paged.freed_blocks(), 13) << dtype_name(t);
    if (t == DType::F32)
      EXPECT_LE(test::max_abs_diff(got, hf), 1e-4f) << "paged + freed blocks vs transformers";
    else
      EXPECT_LE(test::max_abs_diff(got, hf), 0.5f) << "int8 pages vs transformers";
    // Rewinding into freed context is an error, not a read of recycled memory.
    EXPECT_THROW(paged.set_length(4), KvlmError);
  }
}

TEST(SlidingWindowPages, GenerationFarPastTheWindowRunsInAFixedPool) {
  auto m = load_model(test::fixtures_dir() + "/mistral_tiny");
  EngineOptions o;
  o.block_size = 4;
  o.num_blocks = 4;  // 16 token slots for a 100-token sequence
  Engine e(*m, o);
  int id = e.add({{1, 5, 9}, 100, {}, false, ""});
  drain(e);
  EXPECT_EQ(e.seq(id).state, SeqState::Finished) << e.seq(id).error;
  EXPECT_EQ(e.seq(id).generated(), 100);
  // The same tokens as a pool big enough to keep everything (windowed attention never looks back).
  EngineOptions big = o;
  big.num_blocks = 64;
  Engine f(*m, big);
  int id2 = f.add({{1, 5, 9}, 100, {}, false, ""});
  drain(f);
  EXPECT_EQ(generated(e, id), generated(f, id2));
}

TEST(SlidingWindowPages, ModelsWithGlobalLayersKeepEveryBlock) {
  auto m = load_model(test::fixtures_dir() + "/gptneo_tiny");  // local and global layers alternate
  KvPages pages(m->cfg, 4, 32);
  BlockPool pool(pages);
  EXPECT_EQ(pages.window(), 0);
  std::vector<int> ids = fixture_ids(test::fixtures_dir() + "/gptneo_tiny");
  PagedKvCache paged(pages, pool, static_cast<int>(ids.size()));
  stepwise_logits(*m, paged, ids);
  EXPECT_EQ(paged.freed_blocks(), 0);
  EXPECT_EQ(paged.live_blocks(), static_cast<int>(ids.size()) / 4);
}

}  // namespace
}  // namespace kvlm
