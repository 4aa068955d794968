// Mixture-of-experts layers (Mixtral, Qwen3-MoE, gpt-oss) and gpt-oss's sinks: only the experts a token's router picks
// are read, the decode roofline counts those alone, and GGUF expert stacks are checked and refused by name when
// malformed. Conformance with transformers is in conformance_hf_test.cpp.
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/forward.h"
#include "gguf_edit.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_pages.h"
#include "kv/paged_cache.h"
#include "model/model.h"
#include "test_support.h"

namespace kvlm {
namespace {

using nlohmann::json;
using Meta = std::map<std::string, GgufValue>;
using Tensors = std::vector<test::GgufTensorOut>;

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/" + name; }

std::vector<float> prefill_logits(const Model& m, const std::vector<int>& ids) {
  ContiguousKvCache c(m.cfg, static_cast<int>(ids.size()));
  std::vector<float> out;
  forward(m, c, ids.data(), static_cast<int>(ids.size()), LogitsFor::Last, out);
  return out;
}

Linear nan_like(const Linear& l) {
  Linear n;
  n.out = l.out;
  n.in = l.in;
  n.w = Buffer<float>(static_cast<size_t>(l.out) * l.in);
  std::fill(n.w.begin(), n.w.end(), std::numeric_limits<float>::quiet_NaN());
  return n;
}

// An expert whose weights are all NaN poisons the logits if any of its values reach them (even
// weighed by 0): for one token, exactly experts_per_token experts per layer may do so.
TEST(Moe, UnchosenExpertsAreNeverRead) {
  for (const char* name : {"mixtral_tiny", "qwen3moe_tiny"}) {
    auto m = load_model(fixture(name));
    const ModelConfig& c = m->cfg;
    const std::vector<int> token = {17};
    const std::vector<float> clean = prefill_logits(*m, token);
    for (int l = 0; l < c.n_layers; ++l) {
      int read = 0;
      for (int e = 0; e < c.n_experts; ++e) {
        Expert saved = std::move(m->layers[l].experts[e]);
        Expert& x = m->layers[l].experts[e];
        x.gate = nan_like(saved.gate);
        x.up = nan_like(saved.up);
        x.down = nan_like(saved.down);
        const std::vector<float> got = prefill_logits(*m, token);
        m->layers[l].experts[e] = std::move(saved);
        const bool poisoned = std::any_of(got.begin(), got.end(), [](float v) { return std::isnan(v); });
        if (!poisoned) EXPECT_EQ(got, clean) << name << " layer " << l << " expert " << e;
        read += poisoned;
      }
      EXPECT_EQ(read, c.experts_per_token) << name << " layer " << l;
    }
  }
}

// gpt-oss's sinks, end to end in f32 pages (the other encodings: attention_batch_test.cpp; their
// rounding flips this tiny model's near-tied expert choices, so logits say little there): within
// f32 rounding of HF's float64 logits, and far from them with the sinks pushed down.
TEST(Moe, SinksChangeTheLogitsAsTransformersDoes) {
  const std::string dir = fixture("gptoss_tiny");
  auto m = load_model(dir);
  const json e = json::parse(test::read_file(dir + "/expected.json"));
  std::vector<int> ids = e["prompt_ids"].get<std::vector<int>>();
  for (int t : e["greedy_ids"].get<std::vector<int>>()) ids.push_back(t);
  const std::vector<float> ref = test::read_f32(dir + "/logits.f32");
  const int n = static_cast<int>(ids.size());
  auto stepwise = [&](const Model& model) {
    KvPages pages(model.cfg, 16, n / 16 + 4, DType::F32);
    BlockPool pool(pages);
    PagedKvCache kv(pages, pool, n, "", 0);
    std::vector<float> all, step;
    for (int i = 0; i < n; ++i) {
      forward(model, kv, &ids[i], 1, LogitsFor::Last, step);
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  };
  EXPECT_LE(test::max_abs_diff(stepwise(*m), ref), 1e-4f);
  for (LayerWeights& L : m->layers) std::fill(L.attn_sinks.begin(), L.attn_sinks.end(), -1e4f);
  EXPECT_GT(test::max_abs_diff(stepwise(*m), ref), 1e-2f) << "the sinks change nothing";
}

// DeepSeek's latent attention caches one row of kv_lora_rank + qk_rope_head_dim values per
// position and layer, read by every head as its key and its value: pages hold it once. The
// expanded figure is what the same model's per-head keys and values would take.
TEST(Moe, LatentAttentionCachesOneLatentRowPerPosition) {
  auto m = load_model(fixture("deepseek3_tiny"));
  const ModelConfig& c = m->cfg;
  ASSERT_TRUE(c.mla());
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.kv_dim(), 48 + 16);
  EXPECT_EQ(KvPages::block_bytes(c, 1, DType::F16), 3u * 64 * 2);
  for (DType t : {DType::F32, DType::Int8}) {
    KvPages pages(c, 16, 4, t);
    EXPECT_EQ(pages.values_are_keys(), true);
    if (t == DType::F32) EXPECT_EQ(pages.v(1, 2), pages.k(1, 2));
    if (t == DType::Int8) EXPECT_EQ(pages.vq(1, 2), pages.kq(1, 2));
    if (t == DType::Int8) EXPECT_EQ(pages.vp(1, 2), pages.kp(1, 2));
  }
  EXPECT_EQ(KvPages::expanded_token_bytes(c, DType::F16), 3u * 4 * (16 + 16 + 24) * 2);
  EXPECT_EQ(KvPages::expanded_token_bytes(load_model(fixture("llama_tiny"))->cfg, DType::F16), 0u);
  // Layer 0 is dense (first_k_dense_replace), the others route over groups with a shared expert.
  EXPECT_EQ(c.layer_moe, (std::vector<int>{0, 1, 1}));
  EXPECT_TRUE(m->layers[0].experts.empty());
  EXPECT_EQ(m->layers[1].shared_expert.gate.out, 32);
}

TEST(Moe, DecodeRooflineCountsTheActiveExperts) {
  auto m = load_model(fixture("mixtral_tiny"));
  const ModelConfig& c = m->cfg;
  ASSERT_EQ(c.n_experts, 4);
  ASSERT_EQ(c.experts_per_token, 2);
  const size_t expert_bytes = 3ull * c.dim * c.expert_hidden_dim * sizeof(float);
  EXPECT_EQ(m->weight_bytes() - m->active_weight_bytes(), c.n_layers * (c.n_experts - 2) * expert_bytes);
  // A dense model reads everything.
  auto dense = load_model(fixture("llama_tiny"));
  EXPECT_EQ(dense->active_weight_bytes(), dense->weight_bytes());
}

TEST(Moe, GgufExpertStacksRunInTheirStoredTypes) {
  // llama.cpp's converter writes Q8_0 stacks where rows tile into blocks of 32 and F16 where they
  // do not (Qwen3-MoE's down projections, 48 wide): each expert keeps its stack's type.
  auto m = load_model(fixture("qwen3moe_tiny/model-Q8_0.gguf"));
  for (const LayerWeights& L : m->layers) {
    ASSERT_EQ(L.experts.size(), 8u);
    for (const Expert& e : L.experts) {
      EXPECT_EQ(e.gate.fmt, DType::Q8_0);
      EXPECT_EQ(e.up.fmt, DType::Q8_0);
      EXPECT_EQ(e.down.fmt, DType::F16);
    }
  }
}

TEST(Moe, MalformedGgufExpertsAreRefusedByName) {
  const std::string mixtral = fixture("mixtral_tiny/model-F32.gguf");
  auto error_of = [](const std::string& path) {
    try {
      load_model(path);
    } catch (const KvlmError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string used = test::edit_gguf(mixtral, "moe_used.gguf",
                                     [](Meta& m, Tensors&) { m["llama.expert_used_count"] = test::gguf_u32(5); });
  EXPECT_NE(error_of(used).find("expert_used_count = 5 is out of range [1, 4]"), std::string::npos) << error_of(used);
  std::string flat = test::edit_gguf(mixtral, "moe_flat.gguf", [](Meta&, Tensors& t) {
    for (auto& x : t)
      if (x.name == "blk.0.ffn_up_exps.weight") x.shape = {4 * x.shape[1], x.shape[2]};
  });
  EXPECT_NE(error_of(flat).find("blk.0.ffn_up_exps.weight must be a 3-D stack of expert matrices"), std::string::npos)
      << error_of(flat);
  std::string fewer = test::edit_gguf(mixtral, "moe_fewer.gguf",
                                      [](Meta& m, Tensors&) { m["llama.expert_count"] = test::gguf_u32(3); });
  EXPECT_NE(error_of(fewer).find("block_sparse_moe.gate.weight"), std::string::npos) << error_of(fewer);
  // A family without experts refuses the key instead of ignoring it.
  std::string dense = test::edit_gguf(fixture("qwen3_tiny/model-F32.gguf"), "dense_experts.gguf",
                                      [](Meta& m, Tensors&) { m["qwen3.expert_count"] = test::gguf_u32(4); });
  EXPECT_NE(error_of(dense).find("qwen3.expert_count is not supported"), std::string::npos) << error_of(dense);
}

// YaRN is read where the family takes it (gpt-oss), and refused by name elsewhere, in both formats.
TEST(Moe, YarnIsReadOnlyWhereTheFamilyTakesIt) {
  auto m = load_model(fixture("gptoss_gguf/model-F32.gguf"));
  EXPECT_EQ(m->cfg.rope_scaling, "yarn");
  EXPECT_FLOAT_EQ(m->cfg.rope_attn_factor, static_cast<float>(1.0 + 0.1 * std::log(4.0)));
  EXPECT_EQ(m->cfg.layer_window, (std::vector<int>{8, 0, 8, 0}));
  std::string err;
  try {
    load_model(test::edit_gguf(fixture("llama_tiny/model-F32.gguf"), "llama_yarn.gguf", [](Meta& meta, Tensors&) {
      meta["llama.rope.scaling.type"] = test::gguf_str("yarn");
      meta["llama.rope.scaling.factor"] = test::gguf_f32(4.0);
    }));
  } catch (const KvlmError& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("rope.scaling.type 'yarn' is not supported"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvlm
