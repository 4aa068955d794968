// Every dispatched SIMD kernel against its scalar twin, over sizes and misalignments.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/sampler.h"
#include "kernels/dot.h"
#include "kernels/ops.h"
#include "kernels/vexp.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

TEST(Kernels, DotMatchesScalarTwinAllSizesAndOffsets) {
  auto a = randn(600, 1), b = randn(600, 2);
  for (size_t n = 0; n <= 300; ++n)
    for (size_t off = 0; off < 8; ++off) {
      float fast = dot_f32(a.data() + off, b.data() + (7 - off), n);
      float ref = scalar::dot_f32(a.data() + off, b.data() + (7 - off), n);
      double exact = 0;
      for (size_t i = 0; i < n; ++i) exact += double(a[off + i]) * b[7 - off + i];
      EXPECT_NEAR(fast, ref, 1e-4 * (1 + std::sqrt(double(n)))) << "n=" << n << " off=" << off << " isa=" << kernel_isa();
      EXPECT_NEAR(ref, exact, 1e-4 * (1 + std::sqrt(double(n))));
    }
}

TEST(Kernels, AxpyMatchesScalarTwinAllSizesAndOffsets) {
  auto x = randn(300, 3);
  for (size_t n = 0; n <= 100; ++n)
    for (size_t off = 0; off < 8; ++off) {
      auto y1 = randn(300, 4), y2 = y1;
      axpy_f32(0.37f, x.data() + off, y1.data() + (7 - off), n);
      scalar::axpy_f32(0.37f, x.data() + off, y2.data() + (7 - off), n);
      for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 1e-6) << "n=" << n << " off=" << off;
    }
}

TEST(Kernels, MatmulEqualsRowDots) {
  const int out = 37, in = 45, n = 5;
  auto W = randn(out * in, 5), x = randn(n * in, 6), b = randn(out, 7);
  std::vector<float> y(n * out);
  matmul(W.data(), b.data(), out, in, x.data(), n, y.data());
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < out; ++o) {
      double ref = b[o];
      for (int i = 0; i < in; ++i) ref += double(W[o * in + i]) * x[t * in + i];
      EXPECT_NEAR(y[t * out + o], ref, 1e-4);
    }
}

TEST(Kernels, RopeConventionsRotateTheSamePairs) {
  // rotate-half on a vector whose halves are the even/odd lanes = adjacent pairs on the original.
  const int d = 8;
  std::vector<float> inv = {1.0f, 0.1f, 0.01f, 0.001f};
  auto v = randn(d, 8);
  std::vector<float> adj = v, half(d);
  for (int i = 0; i < d / 2; ++i) {
    half[i] = v[2 * i];
    half[i + d / 2] = v[2 * i + 1];
  }
  float cs[d / 2], sn[d / 2];
  rope_angles(7, inv.data(), d / 2, cs, sn);
  EXPECT_FLOAT_EQ(cs[1], std::cos(0.7f));
  EXPECT_FLOAT_EQ(sn[1], std::sin(0.7f));
  rope_adjacent(adj.data(), d, cs, sn);
  rope_rotate_half(half.data(), d, cs, sn);
  for (int i = 0; i < d / 2; ++i) {
    EXPECT_NEAR(adj[2 * i], half[i], 1e-6);
    EXPECT_NEAR(adj[2 * i + 1], half[i + d / 2], 1e-6);
  }
}

// The vectorized activations (AVX2 exp polynomial) against libm twins, at every tail length and
// far into both saturating ends.
TEST(Kernels, VectorActivationsMatchScalarTwins) {
  for (size_t n : {1, 7, 8, 9, 17, 1000}) {
    auto h = randn(n, 40 + n), up = randn(n, 50 + n);
    for (size_t i = 0; i < n; ++i) h[i] *= (i % 5 == 0) ? 40.0f : 3.0f;  // up to |x| ~ 150
    auto a = h, b = h, c = h, d = h;
    silu_mul(a.data(), up.data(), n);
    scalar::silu_mul(b.data(), up.data(), n);
    gelu_tanh_inplace(c.data(), n);
    scalar::gelu_tanh_inplace(d.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(a[i], b[i], 2e-6f * (1 + std::fabs(b[i]))) << "silu x=" << h[i];
      ASSERT_NEAR(c[i], d[i], 2e-6f * (1 + std::fabs(d[i]))) << "gelu x=" << h[i];
    }
  }
  std::vector<float> x = {std::nanf(""), -200.0f, 200.0f, 0.0f}, one(4, 1.0f);
  silu_mul(x.data(), one.data(), 4);
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_EQ(x[1], -0.0f);
  EXPECT_EQ(x[2], 200.0f);
  EXPECT_EQ(x[3], 0.0f);
}

#if KVLM_X86
// Eight values through the general exp and the softmax's (x <= 0) one.
__attribute__((target("avx2,fma"))) void both_exps(const float* x, float* general, float* nonpositive) {
  _mm256_storeu_ps(general, exp8_avx2(_mm256_loadu_ps(x)));
  _mm256_storeu_ps(nonpositive, exp8_nonpositive_avx2(_mm256_loadu_ps(x)));
}
// 32 values through the softmax's exp four vectors at a time.
__attribute__((target("avx2,fma"))) void four_exps(const float* x, float* out) {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  exp8xk_nonpositive_avx2<4>(v);
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, v[k]);
}

// The softmax's exp (one vector or four interleaved) gives the general one's results bit for bit
// wherever it is used: every x <= 0, across the whole range (results that are subnormal
// included), below it, -inf and NaN.
TEST(Kernels, SoftmaxExpIsTheGeneralExpBitForBitBelowZero) {
  if (!isa_at_least(Isa::Avx2)) GTEST_SKIP() << "this CPU lacks avx2: that path is not tested here";
  std::vector<float> x = {0.0f, -0.0f, -1e-30f, -87.3365448f, -87.3365f, -87.34f, -100.0f, -1e30f,
                          -std::numeric_limits<float>::infinity(), std::nanf(""), -std::numeric_limits<float>::denorm_min(), -0.5f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-90.0f, 0.0f);
  for (int i = 0; i < 200000; ++i) x.push_back(u(rng));
  for (float v = -88.0f; v <= -80.0f; v += 1e-3f) x.push_back(v);  // where results turn subnormal
  while (x.size() % 32) x.push_back(-1.0f);
  for (size_t i = 0; i < x.size(); i += 32) {
    float c[32];
    four_exps(x.data() + i, c);
    for (size_t i8 = i; i8 < i + 32; i8 += 8) {
      float a[8], b[8];
      both_exps(x.data() + i8, a, b);
      for (int l = 0; l < 8; ++l) {
        const float four = c[i8 - i + l];
        if (std::isnan(x[i8 + l])) {
          ASSERT_TRUE(std::isnan(a[l]) && std::isnan(b[l]) && std::isnan(four));
          continue;
        }
        ASSERT_EQ(std::memcmp(&a[l], &b[l], 4), 0) << "x=" << x[i8 + l] << ": " << a[l] << " vs " << b[l];
        ASSERT_EQ(std::memcmp(&a[l], &four, 4), 0) << "x=" << x[i8 + l] << ": " << a[l] << " vs four at once " << four;
      }
    }
  }
  // The general exp at its ends: overflow to inf, NaN (of either sign) kept, and inside the range
  // within 2 ulp of libm's.
  const float inf = std::numeric_limits<float>::infinity();
  const float ends[8] = {inf, 88.8f, 1e30f, std::nanf(""), -std::nanf(""), -inf, 88.7f, 1.0f};
  float got[8], unused[8];
  both_exps(ends, got, unused);
  for (int l : {0, 1, 2}) EXPECT_EQ(got[l], inf) << "x=" << ends[l];
  EXPECT_TRUE(std::isnan(got[3]) && std::isnan(got[4]));
  EXPECT_EQ(got[5], 0.0f);
  for (int l : {6, 7}) EXPECT_NEAR(got[l], std::exp(ends[l]), 2.5e-7f * std::exp(ends[l])) << "x=" << ends[l];
}
#endif

TEST(Kernels, NormsAndActivations) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 1, 1}, b = {0, 0, 0, 0}, out(4);
  rmsnorm(x.data(), w.data(), out.data(), 4, 0.0f + 1e-12f);
  EXPECT_NEAR(out[3], 4 / std::sqrt(7.5), 1e-5);
  layernorm(x.data(), w.data(), b.data(), out.data(), 4, 1e-12f);
  EXPECT_NEAR(out[0], -1.5 / std::sqrt(1.25), 1e-5);
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411920, 1e-6);
  EXPECT_NEAR(silu(1.0f), 0.7310586, 1e-6);
  std::vector<float> s = {1000, 1000};
  softmax(s.data(), 2);
  EXPECT_FLOAT_EQ(s[0], 0.5f);
}

TEST(Sampler, GreedyTakesLowestIdOnTies) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(Sampler::argmax(l.data(), 4), 1);
  Sampler s({0.0f, 0, 1.0f, 0});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, TopKOneIsGreedyAndSeedsReproduce) {
  auto l = randn(100, 9);
  Sampler k1({1.0f, 1, 1.0f, 42});
  EXPECT_EQ(k1.sample(l.data(), 100), Sampler::argmax(l.data(), 100));
  Sampler a({0.8f, 0, 0.9f, 7}), b({0.8f, 0, 0.9f, 7});
  std::vector<int> sa, sb;
  for (int i = 0; i < 50; ++i) {
    sa.push_back(a.sample(l.data(), 100));
    sb.push_back(b.sample(l.data(), 100));
  }
  EXPECT_EQ(sa, sb);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  std::vector<float> l = {10, 9.9f, -10, -10, -10};  // nucleus at p=0.5 is {0}; {0,1} at 0.9
  Sampler s({1.0f, 0, 0.5f, 3});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l.data(), 5), 0);
  Sampler s2({1.0f, 0, 0.9f, 3});
  for (int i = 0; i < 100; ++i) EXPECT_LE(s2.sample(l.data(), 5), 1);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), std::exception);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), std::exception);
  EXPECT_THROW(Sampler({1.0f, -2, 1.0f, 0}), std::exception);
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return p;
  };
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.logit_bias = {{3, 101.0f}}; })), KvlmError);
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; })), KvlmError);
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; })), KvlmError);
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.presence_penalty = 2.5f; })), KvlmError);
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.frequency_penalty = std::nanf(""); })), KvlmError);
  EXPECT_THROW(Sampler(with([](SamplingParams& p) { p.min_p = 1.5f; })), KvlmError);
}

// The adjustments against their published formulas, one decision each side of a threshold:
// logit_bias adds (OpenAI), frequency and presence subtract c * f + p over the output (OpenAI's
// "mu[j] -= c[j] * alpha_frequency + (c[j] > 0) * alpha_presence"), repetition divides a seen
// positive logit and multiplies a negative one over prompt and output (Hugging Face's
// RepetitionPenaltyLogitsProcessor), min_p keeps p >= min_p * p_max (vLLM).
TEST(Sampler, BiasAndPenaltiesFollowTheirFormulas) {
  const std::vector<float> l = {2.0f, 1.5f, 1.0f, -1.0f};
  auto greedy = [&](auto set, std::vector<int> history = {}, int prompt_len = 0) {
    SamplingParams p;
    set(p);
    Sampler s(p);
    return s.sample(l.data(), 4, history.data(), static_cast<int>(history.size()), prompt_len);
  };
  EXPECT_EQ(greedy([](SamplingParams&) {}), 0);
  EXPECT_EQ(greedy([](SamplingParams& p) { p.logit_bias = {{2, 1.01f}}; }), 2);   // 1.0 + 1.01 > 2.0
  EXPECT_EQ(greedy([](SamplingParams& p) { p.logit_bias = {{2, 0.99f}}; }), 0);
  EXPECT_EQ(greedy([](SamplingParams& p) { p.logit_bias = {{0, -100.0f}}; }), 1);  // banned
  // Token 0 twice in the output (after a prompt of {3}).
  const std::vector<int> h = {3, 0, 0};
  EXPECT_EQ(greedy([](SamplingParams& p) { p.frequency_penalty = 0.26f; }, h, 1), 1);  // 2 - 0.52 < 1.5
  EXPECT_EQ(greedy([](SamplingParams& p) { p.frequency_penalty = 0.24f; }, h, 1), 0);
  EXPECT_EQ(greedy([](SamplingParams& p) { p.presence_penalty = 0.51f; }, h, 1), 1);   // once: 2 - 0.51
  EXPECT_EQ(greedy([](SamplingParams& p) { p.presence_penalty = 0.49f; }, h, 1), 0);
  // In the prompt only: no frequency or presence penalty, but the repetition penalty.
  EXPECT_EQ(greedy([](SamplingParams& p) { p.frequency_penalty = 2.0f, p.presence_penalty = 2.0f; }, {0, 3}, 2), 0);
  EXPECT_EQ(greedy([](SamplingParams& p) { p.repetition_penalty = 1.34f; }, {0, 3}, 2), 1);  // 2 / 1.34 < 1.5
  EXPECT_EQ(greedy([](SamplingParams& p) { p.repetition_penalty = 1.32f; }, {0, 3}, 2), 0);
  // A negative logit is multiplied: by 0.4 it rises (-1 * 0.4 = -0.4), so with tokens 0 and 1
  // banned and token 2 biased to -0.8, token 3 (-1) wins only where it was seen.
  auto ban3 = [](SamplingParams& p) { p.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -1.8f}}; };
  EXPECT_EQ(greedy(ban3), 2);
  EXPECT_EQ(greedy([&](SamplingParams& p) { ban3(p), p.repetition_penalty = 0.4f; }, {3}, 1), 3);
  // One sampler over several steps (its counts start from zero each step): token 0 penalized
  // in the first, not in the second, whose history lacks it.
  {
    SamplingParams p;
    p.presence_penalty = 0.51f;
    Sampler s(p);
    const std::vector<int> with0 = {3, 0}, without0 = {3, 2};
    EXPECT_EQ(s.sample(l.data(), 4, with0.data(), 2, 1), 1);
    EXPECT_EQ(s.sample(l.data(), 4, without0.data(), 2, 1), 0);
  }
  // min_p at temperature 1: p1 / p0 = e^-0.5 = 0.607, p2 / p0 = e^-1 = 0.368.
  for (float mp : {0.5f, 0.62f}) {
    SamplingParams p(1.0f, 0, 1.0f, 5);
    p.min_p = mp;
    Sampler s(p);
    std::set<int> seen;
    for (int i = 0; i < 300; ++i) seen.insert(s.sample(l.data(), 4));
    EXPECT_EQ(seen, mp < 0.6f ? std::set<int>({0, 1}) : std::set<int>({0})) << mp;
  }
}

}  // namespace
}  // namespace kvlm

#include "kernels/attention.h"

namespace kvlm {
namespace {

TEST(Kernels, AttentionSpansMatchScalarTwinAndPlainSoftmax) {
  for (int hd : {8, 16, 64, 128, 13}) {  // 64 and 128 have kernels of their own (loops unrolled)
    for (int g : {1, 2, 4, 5, 8, 12, 16}) {  // 8s: eight heads by eight keys; other 4+: four heads by pairs of keys; fewer: four keys per head
      const int n = 70, stride = hd * 3 + 1;  // odd stride: misaligned rows
      auto q = randn(g * hd, 11), kv = randn(static_cast<size_t>(n) * stride + hd, 12), vv = randn(static_cast<size_t>(n) * stride + hd, 13);
      std::vector<float> m(g), l(g), acc(g * hd), s(g * n), out(g * hd);
      AttnState st{g, hd, m.data(), l.data(), acc.data()};
      st.reset();
      for (int j0 = 0; j0 < n; j0 += 32) {  // three spans, the last partial
        int cnt = std::min(32, n - j0);
        attn_scores(q.data(), g, hd, 0.3f, kv.data() + j0 * stride, stride, cnt, s.data(), n);
        std::vector<float> s2(g * n);
        scalar::attn_scores(q.data(), g, hd, 0.3f, kv.data() + j0 * stride, stride, cnt, s2.data(), n);
        for (int i = 0; i < g; ++i)
          for (int j = 0; j < cnt; ++j) ASSERT_NEAR(s[i * n + j], s2[i * n + j], 1e-4) << "hd " << hd;
        attn_update(st, s.data(), n, cnt);
        attn_accumulate(st, s.data(), n, vv.data() + j0 * stride, stride, cnt);
      }
      attn_finish(st, out.data(), hd);
      for (int i = 0; i < g; ++i) {  // plain softmax reference in double
        std::vector<double> w(n);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int x = 0; x < hd; ++x) d += double(q[i * hd + x]) * kv[j * stride + x];
          w[j] = 0.3 * d;
          mx = std::max(mx, w[j]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double ref = 0;
          for (int j = 0; j < n; ++j) ref += w[j] / sum * vv[j * stride + d];
          EXPECT_NEAR(out[i * hd + d], ref, 1e-4) << "hd " << hd << " g " << g;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvlm
