// Quantized and bf16 weights: kernels against their scalar twins, quantization round trips, and
// the conformance fixtures and stories260K run with every weight type, their top-1 agreement
// with the f32 reference reported (and bounded).
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "core/cpu.h"
#include "core/half.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "io/tensor_source.h"
#include "kernels/dot.h"
#include "kernels/half_dot.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "kv/kv_cache.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

TEST(WeightKernels, PackedQuantizedKernelsMatchScalarTwinsBitForBit) {
  for (DType f : {DType::Q8_0, DType::Q4_0})
    for (int nb = 1; nb <= 12; ++nb)
      for (int off = 0; off < 4; ++off) {
        const int in = nb * 32, n = 5;
        auto w = randn(static_cast<size_t>(kGroupRows) * in, nb), x = randn(static_cast<size_t>(n) * in, 100 + nb);
        auto packed = pack_quantized(f, w.data(), kGroupRows, in);
        std::vector<uint8_t> shifted(packed.size() + off);  // misaligned weights
        std::copy(packed.begin(), packed.end(), shifted.begin() + off);
        QuantizedActs acts;
        acts.quantize(x.data(), n, in);
        for (int t0 = 0; t0 < n; ++t0)
          for (int nt = 1; nt <= std::min(4, n - t0); ++nt) {
            float got[4][kGroupRows], ref[4][kGroupRows];
            qgemm_group(f, shifted.data() + off, acts, t0, nt, got);
            scalar::qgemm_group(f, packed.data(), acts, t0, nt, ref);
            for (int t = 0; t < nt; ++t)
              for (int i = 0; i < kGroupRows; ++i)
                ASSERT_EQ(got[t][i], ref[t][i]) << dtype_name(f) << " nb " << nb << " t " << t0 + t << " row " << i;
          }
      }
}

// GGUF blocks packed as stored equal the blocks re-derived from their dequantized values (so a
// Q8_0 / Q4_0 file runs its own quants), and unpacking gives GGUF's dequantized values exactly.
TEST(WeightKernels, GgufBlocksPackAsStoredAndUnpackToTheirValues) {
  for (DType f : {DType::Q8_0, DType::Q4_0}) {
    const int out = 11, in = 96, nb = in / 32;
    const DType t = f;  // the file's block type and the weights' type are one
    const size_t block = dtype_block_bytes(t);
    std::vector<uint8_t> gguf(static_cast<size_t>(out) * nb * block);
    std::mt19937 rng(3);
    for (size_t i = 0; i < gguf.size(); ++i) gguf[i] = static_cast<uint8_t>(rng());
    for (int r = 0; r < out * nb; ++r) {  // blocks as ggml writes them: Q8_0 scale amax/127 > 0, quants in -127..127
      const float d = 0.001f * (1 + r % 7) * (f == DType::Q4_0 && r % 2 ? -1 : 1);
      const uint16_t h = f32_to_f16(d);
      std::memcpy(gguf.data() + r * block, &h, 2);
      if (f == DType::Q8_0) {
        for (int k = 0; k < 32; ++k)
          if (gguf[r * block + 2 + k] == 0x80) gguf[r * block + 2 + k] = 0x81;
        gguf[r * block + 2 + r % 32] = r % 3 ? 127 : 0x81;  // the block's largest magnitude is 127
      }
    }
    std::vector<float> want(static_cast<size_t>(out) * in), got(want.size());
    dequantize(t, gguf.data(), want.data(), want.size());
    auto packed = pack_gguf_blocks(f, gguf.data(), out, in);
    unpack_to_f32(f, packed.data(), out, in, got.data());
    ASSERT_EQ(got, want) << dtype_name(f);
    if (f == DType::Q8_0) {  // Q4_0 blocks of random nibbles need not use the -8 end
      auto again = pack_quantized(f, want.data(), out, in);
      EXPECT_TRUE(std::equal(again.begin(), again.end(), packed.begin())) << dtype_name(f);
    }
  }
}

// Linear::forward against an independent reference: the weights and activations quantized row
// by row with quantize_row_*, dequantized, and dotted in double. Covers row counts that are not
// a multiple of the 8-row group, and token counts that are not a multiple of the 4-token tile.
TEST(WeightKernels, QuantizedLinearMatchesDequantizedReference) {
  for (DType f : {DType::Q8_0, DType::Q4_0})
    for (int out : {1, 7, 13, 64})
      for (int n : {1, 3, 6}) {
        const int in = 96, nb = in / 32;
        auto w = randn(static_cast<size_t>(out) * in, out), x = randn(static_cast<size_t>(n) * in, 7 * n);
        Linear l;
        l.out = out;
        l.in = in;
        l.w = w;
        l.b = randn(out, 3);
        ASSERT_TRUE(l.convert(f));
        std::vector<float> y(static_cast<size_t>(n) * out);
        l.forward(x.data(), n, y.data());
        std::vector<float> ws(nb), xs(nb);
        std::vector<int8_t> wq(in), xq(in);
        std::vector<uint8_t> w4(in / 2);
        for (int r = 0; r < out; ++r)
          for (int t = 0; t < n; ++t) {
            quantize_row_q8_0(x.data() + static_cast<size_t>(t) * in, in, xs.data(), xq.data());
            std::vector<double> wd(in);
            if (f == DType::Q8_0) {
              quantize_row_q8_0(w.data() + static_cast<size_t>(r) * in, in, ws.data(), wq.data());
              for (int i = 0; i < in; ++i) wd[i] = f16_to_f32(f32_to_f16(ws[i / 32])) * wq[i];
            } else {
              quantize_row_q4_0(w.data() + static_cast<size_t>(r) * in, in, ws.data(), w4.data());
              for (int i = 0; i < in; ++i) {
                const int b = i / 32, k = i % 32;
                const int u = k < 16 ? (w4[b * 16 + k] & 0xF) : (w4[b * 16 + k - 16] >> 4);
                wd[i] = f16_to_f32(f32_to_f16(ws[b])) * (u - 8);
              }
            }
            double ref = l.b[r];
            for (int i = 0; i < in; ++i) ref += wd[i] * xs[i / 32] * xq[i];
            ASSERT_NEAR(y[static_cast<size_t>(t) * out + r], ref, 1e-4 * (1 + std::fabs(ref)))
                << dtype_name(f) << " out " << out << " n " << n << " row " << r << " token " << t;
          }
      }
}

// f32 -> f16 rounding (used for the packed scales) against the CPU's own conversion: F16C on
// x86, FCVT (the __fp16 cast) on aarch64.
#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hardware_f16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
bool have_hardware_f16() { return cpu_features().f16c; }
#elif defined(__aarch64__)
uint16_t hardware_f16(float f) {
  __fp16 h = static_cast<__fp16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
bool have_hardware_f16() { return true; }
#else
uint16_t hardware_f16(float) { return 0; }
bool have_hardware_f16() { return false; }
#endif
TEST(WeightKernels, F16RoundingMatchesHardware) {
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00u) != 0x7c00u) {
      ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
    }
  if (!have_hardware_f16()) {
    GTEST_SKIP() << "no hardware f16 conversion: rounding checked by round trips only";
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), hardware_f16(f)) << f;
  }
}

TEST(WeightKernels, Bf16DotMatchesScalarTwin) {
  for (int n = 0; n < 80; ++n) {
    auto w = randn(n + 8, n), x = randn(n + 8, n + 500);
    std::vector<uint16_t> w16(n + 8);
    for (size_t i = 0; i < w16.size(); ++i) w16[i] = f32_to_bf16(w[i]);
    EXPECT_NEAR(dot_bf16(w16.data() + 1, x.data() + 3, n), scalar::dot_bf16(w16.data() + 1, x.data() + 3, n), 1e-4);
  }
}

TEST(WeightKernels, Q8_0QuantizationMatchesScalarTwinBitForBit) {
  for (int nb : {1, 2, 5, 64}) {
    auto x = randn(nb * 32 + 3, 90 + nb);
    x[3] = 127.0f;  // scale 1, so 2.5 and -3.5 are exact ties (round to even); zero blocks give d = 0
    x[4] = 2.5f;
    x[5] = -3.5f;
    std::vector<float> zeros(64, 0.0f);
    for (const float* src : {x.data() + 3, zeros.data()}) {
      const int blocks = src == zeros.data() ? 2 : nb;
      std::vector<float> s1(blocks), s2(blocks);
      std::vector<int8_t> q1(blocks * 32), q2(blocks * 32);
      quantize_row_q8_0(src, blocks * 32, s1.data(), q1.data());
      scalar::quantize_row_q8_0(src, blocks * 32, s2.data(), q2.data());
      ASSERT_EQ(s1, s2);
      ASSERT_EQ(q1, q2);
    }
  }
}

// The same codec at a head's size (int8 KV rows, the query of integer attention scores).
TEST(WeightKernels, SymmetricInt8BlocksOfAHeadMatchScalarTwinBitForBit) {
  for (int block : {32, 64, 96, 128, 256, 40})
    for (int nb : {1, 3}) {
      auto x = randn(nb * block + 1, block + nb);
      x[1] = 127.0f, x[2] = 2.5f, x[3] = -3.5f;  // ties round to even
      std::vector<float> s1(nb), s2(nb);
      std::vector<int8_t> q1(nb * block), q2(nb * block);
      quantize_symmetric_i8(x.data() + 1, nb * block, block, s1.data(), q1.data());
      scalar::quantize_symmetric_i8(x.data() + 1, nb * block, block, s2.data(), q2.data());
      ASSERT_EQ(s1, s2) << block;
      ASSERT_EQ(q1, q2) << block;
      EXPECT_EQ(q1[1], 2);
      EXPECT_EQ(q1[2], -4);
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
    // Random tiny models have nearly flat logits (top-2 gaps of 1e-3), so 4-bit weights flip many
    // top-1s here; Q4_0's quality bar on a trained model is the stories260K test above.
    for (Bound b : {Bound{"f32", 1.0}, Bound{"bf16", 0.9}, Bound{"q8_0", 0.9}, Bound{"q4_0", 0.35}}) {
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

namespace kvlm {
namespace {
// Loading keeps every matrix in the file's type: GPT-2's fused q/k/v once came out of the split as
// f32 (4x the bytes per decode step) once nothing re-encoded it after loading.
TEST(WeightFormats, EveryMatrixKeepsTheFileTypeAfterLoading) {
  for (const char* fixture : {"gpt2_tiny", "llama_tiny"}) {
    auto m = load_model(test::fixtures_dir() + "/" + fixture + "/model-Q8_0.gguf");
    for (const LayerWeights& L : m->layers)
      for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
        if (l->out > 0) {
          EXPECT_EQ(l->fmt, DType::Q8_0) << fixture;
        }
      }
    if (m->lm_head.out > 0) {
      EXPECT_EQ(m->lm_head.fmt, DType::Q8_0) << fixture;
    }
  }
}
}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {
// --weights f32 widens a quantized file's matrices: it once left them quantized while `kvlm bench`
// reported the run as f32. source_format keeps what the matrices were given as (the file's type or
// the asked one): --kv-dtype auto follows it.
TEST(WeightFormats, AskedForF32WidensAQuantizedFile) {
  const std::string fx = test::fixtures_dir();
  auto stored = load_model(fx + "/llama_tiny/model-Q8_0.gguf");
  auto wide = load_model(fx + "/llama_tiny/model-Q8_0.gguf", "f32");
  EXPECT_EQ(stored->source_format, DType::Q8_0);
  EXPECT_EQ(wide->source_format, DType::F32);
  for (const LayerWeights& L : wide->layers)
    for (const Linear* l : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      if (l->out > 0) {
        EXPECT_EQ(l->fmt, DType::F32);
      }
    }
  EXPECT_GT(wide->weight_bytes(), 3 * stored->weight_bytes() / 2);
  EXPECT_NE(wide->fingerprint(), stored->fingerprint());
  EXPECT_EQ(load_model(fx + "/llama_tiny")->source_format, DType::F32);
  EXPECT_EQ(load_model(fx + "/llama_tiny", "bf16")->source_format, DType::BF16);
  EXPECT_EQ(load_model(fx + "/llama_f16")->source_format, DType::F16);
  EXPECT_EQ(load_model(fx + "/llama_f16/model-F16.gguf")->source_format, DType::F16);
  EXPECT_EQ(load_model(fx + "/llama_f16/model-F16.gguf", "f32")->source_format, DType::F32);
}
}  // namespace
}  // namespace kvlm
