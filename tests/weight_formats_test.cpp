// Quantized and bf16 weights: kernels against their scalar twins, quantization round trips, and
// the conformance fixtures and stories260K run with every weight type, their top-1 agreement
// with the f32 reference reported (and bounded).
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/sampler.h"
#include "core/half.h"
#include "kernels/linear.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

TEST(WeightKernels, QuantizedDotsMatchScalarTwinsAtEverySizeAndOffset) {
  for (int nb = 1; nb <= 12; ++nb)
    for (int off = 0; off < 4; ++off) {
      int n = nb * 32;
      auto w = randn(n + 64, nb), x = randn(n + 64, 100 + nb);
      std::vector<float> ws(nb + 2), xs(nb + 2);
      std::vector<int8_t> wq(n + 64), xq(n + 64);
      std::vector<uint8_t> w4(n / 2 + 64);
      quantize_row_q8_0(w.data() + off, n, ws.data(), wq.data() + off);
      quantize_row_q8_0(x.data(), n, xs.data(), xq.data() + 3);
      // Integer block sums are exact; only the float accumulation order differs.
      float ref = scalar::dot_q8_0(ws.data(), wq.data() + off, xs.data(), xq.data() + 3, nb);
      EXPECT_NEAR(dot_q8_0(ws.data(), wq.data() + off, xs.data(), xq.data() + 3, nb), ref, 1e-5 * (1 + std::fabs(ref)));
      quantize_row_q4_0(w.data() + off, n, ws.data(), w4.data() + off);
      float ref4 = scalar::dot_q4_0(ws.data(), w4.data() + off, xs.data(), xq.data() + 3, nb);
      EXPECT_NEAR(dot_q4_0(ws.data(), w4.data() + off, xs.data(), xq.data() + 3, nb), ref4, 1e-5 * (1 + std::fabs(ref4)));
    }
  for (int n = 0; n < 80; ++n) {
    auto w = randn(n + 8, n), x = randn(n + 8, n + 500);
    std::vector<uint16_t> w16(n + 8);
    for (size_t i = 0; i < w16.size(); ++i) w16[i] = f32_to_bf16(w[i]);
    EXPECT_NEAR(dot_bf16(w16.data() + 1, x.data() + 3, n), scalar::dot_bf16(w16.data() + 1, x.data() + 3, n), 1e-4);
  }
}

TEST(WeightKernels, QuantizationRoundTripsWithinStatedBounds) {
  auto x = randn(4096, 7);
  std::vector<float> s(128);
  std::vector<int8_t> q8(4096);
  std::vector<uint8_t> q4(2048);
  quantize_row_q8_0(x.data(), 4096, s.data(), q8.data());
  for (int i = 0; i < 4096; ++i) ASSERT_LE(std::fabs(s[i / 32] * q8[i] - x[i]), s[i / 32] * 0.5f + 1e-6f);  // half a step
  quantize_row_q4_0(x.data(), 4096, s.data(), q4.data());
  for (int b = 0; b < 128; ++b)
    for (int i = 0; i < 16; ++i) {
      float lo = s[b] * ((q4[b * 16 + i] & 0xF) - 8), hi = s[b] * ((q4[b * 16 + i] >> 4) - 8);
      // Q4_0's range is [-8d, 7d]: the far end of the short side clamps, so one step, not half.
      ASSERT_LE(std::fabs(lo - x[b * 32 + i]), std::fabs(s[b]) + 1e-6f);
      ASSERT_LE(std::fabs(hi - x[b * 32 + 16 + i]), std::fabs(s[b]) + 1e-6f);
    }
}

// Top-1 agreement of a weight type's logits with the reference, printed for the record.
double agreement(const Model& m, const std::vector<int>& ids, const std::vector<float>& ref, float* err) {
  ContiguousKvCache kv(m.cfg, static_cast<int>(ids.size()));
  std::vector<float> got;
  forward(m, kv, ids.data(), static_cast<int>(ids.size()), LogitsFor::All, got);
  const int V = m.cfg.vocab_size, n = static_cast<int>(ids.size());
  int agree = 0;
  for (int t = 0; t < n; ++t) agree += Sampler::argmax(&got[t * V], V) == Sampler::argmax(&ref[t * V], V);
  *err = test::max_abs_diff(got, ref);
  return static_cast<double>(agree) / n;
}

TEST(WeightFormats, FixturesWithEveryWeightType) {
  struct Bound {
    const char* fmt;
    double min_agree;
  };
  for (const char* f : {"gpt2_tiny", "gptneo_tiny", "llama_tiny", "mistral_tiny", "qwen2_tiny"}) {
    std::string dir = test::fixtures_dir() + "/" + f;
    auto e = nlohmann::json::parse(test::read_file(dir + "/expected.json"));
    std::vector<int> ids = e["prompt_ids"].get<std::vector<int>>();
    for (int t : e["greedy_ids"].get<std::vector<int>>()) ids.push_back(t);
    std::vector<float> ref = test::read_f32(dir + "/logits.f32");
    for (Bound b : {Bound{"f32", 1.0}, Bound{"bf16", 0.9}, Bound{"q8_0", 0.9}, Bound{"q4_0", 0.5}}) {
      float err;
      double a = agreement(*load_model(dir, b.fmt), ids, ref, &err);
      std::printf("[ measured ] %-13s %-5s top-1 agreement %5.1f%%, max-abs logit error %.4f\n", f, b.fmt, 100 * a, err);
      EXPECT_GE(a, b.min_agree) << f << " " << b.fmt;
      if (std::string(b.fmt) == "f32") {
        EXPECT_LE(err, 1e-4f);
      }
    }
  }
}

TEST(WeightFormats, Stories260KWithEveryWeightType) {
  KVLM_NEED_SHARED("golden/stories260K/logits_long_prompt_mia.f32", "stories260K with quantized weights");
  auto side = nlohmann::json::parse(test::read_file(test::shared_path("golden/stories260K/logits_long_prompt_mia.json")));
  std::vector<int> ids = side["token_ids"].get<std::vector<int>>();
  std::vector<float> ref = test::read_f32(test::shared_path("golden/stories260K/logits_long_prompt_mia.f32"));
  for (const char* fmt : {"f32", "bf16", "q8_0", "q4_0"}) {
    float err;
    auto m = load_model(test::shared_path("models/stories260K/stories260K.bin"), fmt);
    double a = agreement(*m, ids, ref, &err);
    std::printf("[ measured ] stories260K   %-5s top-1 agreement %5.1f%%, max-abs logit error %.4f (FFN rows of 172 stay f32)\n",
                fmt, 100 * a, err);
    EXPECT_GE(a, std::string(fmt) == "q4_0" ? 0.7 : 0.9) << fmt;
  }
}

}  // namespace
}  // namespace kvlm
