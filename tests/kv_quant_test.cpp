// Smaller KV: codec round trips within stated bounds, attention over quantized rows against the
// f32 cache on the stories260K goldens, the residual window, and windowed-layer memory.
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/forward.h"
#include "engine/generator.h"
#include "engine/perplexity.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kernels/kv_quant.h"
#include "test_support.h"

namespace kvlm {
namespace {

TEST(KvQuant, RoundTripsStayWithinStatedBounds) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int hd : {8, 64}) {
    const int kv_dim = 4 * hd;
    std::vector<float> x(kv_dim), y(hd);
    for (float& v : x) v = nd(rng);
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Int8, DType::Int4}) {
      KvRowCodec c{t, kv_dim, hd};
      std::vector<uint8_t> data(c.data_bytes());
      std::vector<float> params(c.n_params() + 1);
      c.encode(x.data(), data.data(), params.data());
      for (int h = 0; h < kv_dim / hd; ++h) {
        c.decode_head(data.data(), params.data(), h, y.data());
        float amax = 0, lo = 1e30f, hi = -1e30f;
        for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[h * hd + i]));
        for (int i = 0; i < hd; ++i) {
          const float v = x[h * hd + i];
          float bound = 0;
          if (t == DType::F16) bound = std::fabs(v) / 2048;         // 11 significant bits (no subnormals at this scale)
          if (t == DType::BF16) bound = std::fabs(v) / 256;         // 8 mantissa bits
          if (t == DType::Int8) bound = amax / 127 / 2 + 1e-6f;     // half a step of the head's scale
          if (t == DType::Int4) {                                    // half a step of the 32-group's range
            int g = (h * hd + i) / 32;
            lo = *std::min_element(x.begin() + g * 32, x.begin() + g * 32 + 32);
            hi = *std::max_element(x.begin() + g * 32, x.begin() + g * 32 + 32);
            bound = (hi - lo) / 15 / 2 + 1e-5f;
          }
          ASSERT_LE(std::fabs(y[i] - v), bound) << dtype_name(t) << " hd " << hd << " i " << i;
        }
      }
    }
  }
}

std::vector<float> decode_logits(const Model& m, const std::vector<int>& ids, DType t, int residual) {
  ContiguousKvCache kv(m.cfg, static_cast<int>(ids.size()), t, residual);
  std::vector<float> all, row;
  for (int id : ids) {
    forward(m, kv, &id, 1, LogitsFor::Last, row);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// f16 rows saturate: a finite value beyond f16's range is stored as +-65504, never as an
// infinity (which would turn every score of its head into NaN); infinities and NaN stay what they are.
TEST(KvQuant, F16RowsSaturateAndKeepSubnormals) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1e6f, -1e6f, 65519.0f, 65520.0f, -70000.0f, 65504.0f, inf, -inf,
                                nan, 1.0f / 3, 3e-6f, -6e-8f, 2e-8f, 0.0f, -0.0f, 1e-30f};
  const std::vector<float> want = {65504, -65504, 65504, 65504, -65504, 65504, inf, -inf,
                                   nan, 0.333251953125f, 2.9802322387695312e-06f, -5.9604644775390625e-08f, 0.0f, 0.0f, -0.0f, 0.0f};
  KvRowCodec c{DType::F16, 16, 8};
  std::vector<uint8_t> data(c.data_bytes());
  std::vector<float> a(16), b(16);
  c.encode(x.data(), data.data(), nullptr);
  for (int h = 0; h < 2; ++h) {
    c.decode_head(data.data(), nullptr, h, a.data() + 8 * h);
    c.decode_head_scalar(data.data(), nullptr, h, b.data() + 8 * h);
  }
  for (int i = 0; i < 16; ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(a[i]) && std::isnan(b[i])) << i;
      continue;
    }
    EXPECT_EQ(a[i], want[i]) << "element " << i << " (" << x[i] << ")";
    EXPECT_EQ(b[i], want[i]) << "element " << i << " (" << x[i] << ")";
    EXPECT_EQ(std::signbit(a[i]), std::signbit(want[i])) << i;
  }
}

TEST(KvQuant, VectorDecodersMatchScalarTwinsBitForBit) {
  for (DType t : {DType::F16, DType::BF16, DType::Int8, DType::Int4})
    for (int hd : {8, 32, 64, 128}) {
      const int kv_dim = 4 * std::max(hd, 32);
      if (kv_dim % hd) continue;
      KvRowCodec c{t, kv_dim, hd};
      auto x = test::randn(kv_dim, hd + static_cast<int>(t));
      // f16's subnormals and its saturated ends too.
      for (int i = 0; i < kv_dim; i += 5) x[i] *= (i / 5) % 2 ? 1e-6f : 1e5f;
      std::vector<uint8_t> data(c.data_bytes());
      std::vector<float> params(c.n_params() + 1), a(hd), b(hd);
      c.encode(x.data(), data.data(), params.data());
      for (int h = 0; h < kv_dim / hd; ++h) {
        c.decode_head(data.data(), params.data(), h, a.data());
        c.decode_head_scalar(data.data(), params.data(), h, b.data());
        ASSERT_EQ(a, b) << dtype_name(t) << " head_dim " << hd << " head " << h;
      }
    }
}

TEST(KvQuant, Int8LogitsStayCloseToF32OnStories260K) {
  KVLM_NEED_SHARED("golden/stories260K/logits_long_prompt_mia.f32", "int8 KV against the llama2.c logits");
  auto side = nlohmann::json::parse(test::read_file(test::shared_path("golden/stories260K/logits_long_prompt_mia.json")));
  std::vector<int> ids = side["token_ids"].get<std::vector<int>>();
  std::vector<float> golden = test::read_f32(test::shared_path("golden/stories260K/logits_long_prompt_mia.f32"));
  auto m = load_model(test::shared_path("models/stories260K/stories260K.bin"));
  const int V = m->cfg.vocab_size, n = static_cast<int>(ids.size());
  auto top1 = [&](const std::vector<float>& l) {
    int same = 0;
    for (int t = 0; t < n; ++t) same += Sampler::argmax(&l[t * V], V) == Sampler::argmax(&golden[t * V], V);
    return same;
  };
  // Stated tolerances (logits here span about -19..21; head_dim is only 8, so each int8 scale
  // covers 8 values): int8 and bf16 within 1.0 max-abs and >= 95% top-1 agreement.
  for (DType t : {DType::F16, DType::BF16, DType::Int8, DType::Int4}) {
    std::vector<float> l0 = decode_logits(*m, ids, t, 0), l16 = decode_logits(*m, ids, t, 16);
    float err0 = test::max_abs_diff(l0, golden), err16 = test::max_abs_diff(l16, golden);
    std::printf("[ measured ] stories260K %s KV: max-abs logit error %.4f, top-1 %d/%d (residual 0); %.4f, %d/%d (residual 16)\n",
                dtype_name(t), err0, top1(l0), n, err16, top1(l16), n);
    if (t == DType::F16) {  // 11 significant bits: an order of magnitude closer than bf16's 8
      EXPECT_LE(err0, 0.05f);
      EXPECT_EQ(top1(l0), n);
    }
    if (t != DType::Int4) {
      EXPECT_LE(err0, 1.0f) << dtype_name(t);
      EXPECT_GE(top1(l0), static_cast<int>(std::ceil(0.95 * n))) << dtype_name(t);
      EXPECT_LE(err16, err0 + 1e-6f) << "keeping the newest tokens f32 must not hurt";
    }
  }
  // A residual window as long as the sequence is the f32 cache itself.
  EXPECT_LE(test::max_abs_diff(decode_logits(*m, ids, DType::Int4, 64), golden), 1e-4f);
}

// stories260K's 200-token greedy golden generated with KV type t (and an f32 window of
// `residual`), and the perplexity of 2,048 tokens in windows of 512 with no f32 window.
struct GoldenAndQuality {
  std::vector<int> got, want;
  KvQualityResult q;
};
GoldenAndQuality golden_and_quality(DType t, int residual) {
  auto g = nlohmann::json::parse(test::read_file(test::shared_path("golden/stories260K/greedy_once_upon_a_time.json")));
  auto m = load_model(test::shared_path("models/stories260K/stories260K.bin"));
  GenerateOptions opt;
  opt.max_new_tokens = 200;
  opt.stop_at_eos = false;
  opt.kv_dtype = t;
  opt.kv_residual = residual;
  GoldenAndQuality r;
  r.got = generate(*m, g["prompt_ids"].get<std::vector<int>>(), opt).generated;
  r.want = g["generated_ids"].get<std::vector<int>>();
  auto toks = nlohmann::json::parse(test::read_file(test::shared_path("golden/stories260K/perplexity_tokens.json")));
  std::vector<int> ids = toks["token_ids"].get<std::vector<int>>();
  ids.resize(2048);
  r.q = kv_quality(*m, ids, 512, t, 0);
  std::printf("[ measured ] %s KV (residual 0), 2048 tokens: ppl %.4f vs %.4f (%+.4f%%), KLD mean %.2e p99 %.2e, top-1 %.2f%%\n",
              dtype_name(t), r.q.quantized.perplexity, r.q.f32.perplexity, r.q.ppl_change_pct, r.q.kld_mean, r.q.kld_p99,
              100 * r.q.top1_same);
  return r;
}

TEST(KvQuant, Int8GreedyGoldenAndPerplexity) {
  KVLM_NEED_SHARED("golden/stories260K/greedy_once_upon_a_time.json", "int8 KV on the greedy golden and perplexity");
  const GoldenAndQuality r = golden_and_quality(DType::Int8, 128);
  size_t same = 0;
  while (same < r.got.size() && r.got[same] == r.want[same]) ++same;
  std::printf("[ measured ] int8 KV (residual 128): greedy golden equal for %zu of 200 tokens\n", same);
  EXPECT_GE(same, 100u);
  EXPECT_LE(std::fabs(r.q.ppl_change_pct), 0.5);
  EXPECT_LT(r.q.kv_bytes, r.q.kv_bytes_f32 / 2);
}

// f16 rows with no f32 window at all: the whole greedy golden, and the perplexity within 0.05%.
TEST(KvQuant, F16GreedyGoldenAndPerplexity) {
  KVLM_NEED_SHARED("golden/stories260K/greedy_once_upon_a_time.json", "f16 KV on the greedy golden and perplexity");
  const GoldenAndQuality r = golden_and_quality(DType::F16, 0);
  EXPECT_EQ(r.got, r.want);
  EXPECT_LE(std::fabs(r.q.ppl_change_pct), 0.05);
  EXPECT_EQ(r.q.kv_bytes * 2, r.q.kv_bytes_f32);
}

TEST(KvQuant, SlidingWindowMemoryIsConstantPastTheWindow) {
  auto m = load_model(test::fixtures_dir() + "/mistral_tiny");  // every layer slides a window of 8
  ContiguousKvCache kv(m->cfg, 120);
  EXPECT_EQ(kv.bytes_allocated(), 0u);  // grows with the sequence, up to the window
  std::vector<float> logits;
  const size_t window_bytes = 2u * m->cfg.n_layers * 8 * m->cfg.kv_dim() * sizeof(float);
  for (int t = 0; t < 100; ++t) {
    int tok = (t * 13) % 256;
    forward(*m, kv, &tok, 1, LogitsFor::Last, logits);
    ASSERT_LE(kv.bytes_allocated(), window_bytes);
    if (t >= 8) {
      ASSERT_EQ(kv.bytes_allocated(), window_bytes);
    }
  }
}

TEST(KvQuant, BadKvDtypesAreErrors) {
  EXPECT_THROW(parse_dtype("int3", kInKvPages, "KV dtype"), std::exception);
  auto m = load_model(test::fixtures_dir() + "/llama_tiny");  // kv_dim 32: int4 fits
  EXPECT_NO_THROW(ContiguousKvCache(m->cfg, 8, DType::Int4, 0));
  auto r = test::run_kvlm({"generate", "--model", test::fixtures_dir() + "/llama_tiny", "--tokenizer",
                           test::fixtures_dir() + "/tokenizers/bytelevel_tiny/tokenizer.json", "--prompt", "hi",
                           "--kv-dtype", "int3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown KV dtype 'int3'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvlm
