// Every SIMD path against its scalar twin, at every ISA the CPU has (one run per row of the ISA
// table, capped with IsaScope), over sizes and misaligned pointers. A row the CPU lacks is
// reported SKIPPED with its name, so the CI log shows which paths ran.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/attention_int.h"
#include "kernels/attention_bf16.h"
#include "kernels/dtype.h"
#include "kernels/half_dot.h"
#include "kernels/kv_quant.h"
#include "kernels/row_dot.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

// Runs `check` once under each SIMD row of the ISA table the CPU supports and kvlm has kernels for.
template <class F>
void for_each_simd_isa(F check) {
  int n = 0;
  const IsaRow* rows = isa_table(&n);
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    if (rows[i].isa == Isa::Scalar) continue;
    const char* why = !rows[i].has_kernels                 ? "kvlm has no kernels for"
                      : !rows[i].supported(cpu_features()) ? "this CPU lacks"
                      : static_cast<int>(active_isa()) < static_cast<int>(rows[i].isa) ? "KVLM_ISA caps below"
                                                                                       : nullptr;
    if (why) {
      // Not gtest's "[  SKIPPED ]" marker, which ctest reads as the whole test not run: the
      // rows the CPU has did run.
      std::printf("[  ISA     ] %s: SKIPPED the %s path: %s it\n",
                  ::testing::UnitTest::GetInstance()->current_test_info()->name(), rows[i].name, why);
      continue;
    }
    std::printf("[  ISA     ] %s: testing the %s path\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), rows[i].name);
    IsaScope scope(rows[i].isa);
    SCOPED_TRACE(rows[i].name);
    check();
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no SIMD path on this CPU: only the scalar twins run";
}

// n rows of kv_dim random values encoded by the codec, the data shifted by `off` bytes (misaligned).
struct EncodedKv {
  KvRowCodec c;
  std::vector<uint8_t> raw;
  std::vector<float> params;
  int off;
  EncodedKv(DType t, int kv_dim, int hd, int n, int off_, uint64_t seed)
      : c{t, kv_dim, hd}, raw(c.data_bytes() * n + off_), params(static_cast<size_t>(c.n_params()) * n + 1), off(off_) {
    auto x = randn(static_cast<size_t>(kv_dim) * n, seed);
    for (int j = 0; j < n; ++j)
      c.encode(x.data() + static_cast<size_t>(j) * kv_dim, raw.data() + off + j * c.data_bytes(), params.data() + j * c.n_params());
  }
  EncodedRows head(int h) const { return {&c, raw.data() + off, params.data(), h}; }
  std::vector<float> decoded(int h, int n) const {
    std::vector<float> out(static_cast<size_t>(n) * c.head_dim);
    c.decode_rows(raw.data() + off, params.data(), h, n, out.data());
    return out;
  }
};

// f16 and bf16 rows are encoded eight or sixteen values at a time where the CPU allows: the same
// bits as the scalar conversions for every float (random bit patterns: subnormals, f16's saturated
// ends, infinities), NaN staying NaN; row lengths leave scalar tails.
TEST(IsaKernels, HalfRowEncodingMatchesTheScalarConversions) {
  for_each_simd_isa([] {
    std::mt19937 rng(11);
    for (DType t : {DType::F16, DType::BF16}) {
      for (int kv_dim : {8, 24, 40, 256}) {
        KvRowCodec c{t, kv_dim, 8};
        std::vector<float> x(kv_dim);
        std::vector<uint16_t> h(kv_dim);
        for (int round = 0; round < 2000; ++round) {
          for (float& v : x) {
            uint32_t bits = static_cast<uint32_t>(rng());  // any float
            if (round % 2)  // or one of magnitude 2^-27 .. 2^32: f16's subnormals to beyond its range
              bits = (bits & 0x807fffffu) | (100u + bits % 60u) << 23;
            std::memcpy(&v, &bits, 4);
          }
          c.encode(x.data(), reinterpret_cast<uint8_t*>(h.data()), nullptr);
          for (int i = 0; i < kv_dim; ++i) {
            const uint16_t want = t == DType::F16 ? f32_to_f16_saturated(x[i]) : f32_to_bf16(x[i]);
            if (std::isnan(x[i]) && t == DType::F16) {  // the payload's top bits may differ
              ASSERT_TRUE((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)) << "NaN must stay NaN";
              continue;
            }
            ASSERT_EQ(h[i], want) << dtype_name(t) << " kv_dim " << kv_dim << " value " << x[i];
          }
        }
      }
    }
  });
}

TEST(IsaKernels, EncodedKvReadInRegistersMatchesDecodingFirstBitForBit) {
  for_each_simd_isa([] {
    int widened[2] = {};  // value sums compared, for groups of fewer than 4 heads and of 4+
    for (DType t : {DType::F16, DType::BF16, DType::Int8, DType::Int4})
      for (int hd : {8, 16, 24, 32, 64, 128}) {
        if (t == DType::Int4 && hd % 32 != 0) continue;
        for (int g : {1, 2, 4, 5, 8, 13})  // 13: AVX2 tiles of four heads, then one
          for (int off : {0, 3}) {
            const int kvh = 3, n = 37, h = 1;
            EncodedKv kv(t, kvh * hd, hd, n, off, hd * 31 + g);
            auto q = randn(static_cast<size_t>(g) * hd, 5), dk = kv.decoded(h, n);
            std::vector<float> got(g * n), want(g * n);
            if (!attn_scores_encoded(q.data(), g, hd, 0.2f, kv.head(h), n, got.data(), n)) continue;  // no path: decoded
            attn_scores(q.data(), g, hd, 0.2f, dk.data(), hd, n, want.data(), n);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << dtype_name(t) << " hd " << hd << " g " << g;
            auto p = randn(static_cast<size_t>(g) * n, 6);
            std::vector<float> m(g), l(g), acc1(g * hd, 0.5f), acc2(g * hd, 0.5f);
            AttnState s1{g, hd, m.data(), l.data(), acc1.data()}, s2{g, hd, m.data(), l.data(), acc2.data()};
            // Every head size of 8s has a path: groups of 4+ heads share each widened row
            // (AVX-512: four heads per row of 64 or 128; AVX2: tiles of four heads by 8-element slices).
            ASSERT_TRUE(attn_accumulate_encoded(s1, p.data(), n, kv.head(h), n)) << dtype_name(t) << " hd " << hd << " g " << g;
            ++widened[g >= 4];
            attn_accumulate(s2, p.data(), n, dk.data(), hd, n);
            ASSERT_EQ(std::memcmp(acc1.data(), acc2.data(), acc1.size() * 4), 0) << dtype_name(t) << " hd " << hd << " g " << g;
          }
      }
    EXPECT_GT(widened[0], 0);
    EXPECT_GT(widened[1], 0);
  });
}

// Integer scores against f32 scores of the decoded keys: only the query's rounding to int8
// differs, by at most half a step per element, so |error| <= qs / 2 * sum |k| (plus float rounding).
void expect_within_query_rounding(const QuantQuery& qq, const EncodedKv& kv, int h, const std::vector<float>& q, int n,
                                  const std::vector<float>& got) {
  const int g = qq.g, hd = qq.hd;
  auto dk = kv.decoded(h, n);
  for (int i = 0; i < g; ++i)
    for (int j = 0; j < n; ++j) {
      double exact = 0, abs_k = 0;
      for (int d = 0; d < hd; ++d) exact += double(q[i * hd + d]) * dk[j * hd + d], abs_k += std::fabs(dk[j * hd + d]);
      double amax = 0;
      for (int d = 0; d < hd; ++d) amax = std::max(amax, double(std::fabs(q[i * hd + d])));
      const double scale = double(qq.qs[i]) / (amax / 127.0);  // the attention scale
      const double bound = 0.5 * qq.qs[i] * abs_k * 1.0001 + 1e-5 * std::fabs(exact * scale) + 1e-6;
      ASSERT_LE(std::fabs(got[i * n + j] - exact * scale), bound) << dtype_name(kv.c.dtype) << " head " << i << " key " << j;
    }
}

// A head's f32 scores do not depend on the group it is scored with: eight heads at a time, four,
// one, and a lone head's keys four at a time all sum a key's products in the same tree. (Runs of
// the cache are cut differently by layout; contiguous and paged caches must agree bit for bit.)
TEST(IsaKernels, F32ScoresOfAHeadAreTheSameInEveryGroupSize) {
  for_each_simd_isa([] {
    for (int hd : {8, 64, 128})
      for (int g : {4, 5, 8, 12, 13, 16}) {
        const int n = 37;
        const size_t stride = static_cast<size_t>(hd) * 3 + 5;  // misaligned rows
        auto q = randn(static_cast<size_t>(g) * hd, 7 + g), k = randn(n * stride, 8 + hd);
        std::vector<float> all(static_cast<size_t>(g) * n), one(n);
        attn_scores(q.data(), g, hd, 0.3f, k.data() + 1, stride, n, all.data(), n);
        for (int i = 0; i < g; ++i) {
          attn_scores(q.data() + static_cast<size_t>(i) * hd, 1, hd, 0.3f, k.data() + 1, stride, n, one.data(), n);
          ASSERT_EQ(std::memcmp(one.data(), all.data() + static_cast<size_t>(i) * n, n * 4), 0) << "hd " << hd << " g " << g << " head " << i;
        }
      }
  });
}

// The AVX-512 row's f32 scores (keys in pairs, heads by eights or fours), softmax maxes (four chains
// of 16 lanes) and exponentials (16 lanes) are the AVX2 row's arithmetic, bit for bit: the same
// scores, maxes, weights, denominators and rescaled sums at every length (64-key and 32-key blocks,
// sixteens, eights, tails, a whole span of 256), with keys masked (-inf) and far below the max (exp -> 0).
TEST(IsaKernels, Avx512ScoresAndSoftmaxAreTheAvx2ArithmeticBitForBit) {
  if (static_cast<int>(active_isa()) < static_cast<int>(Isa::Avx512)) {
    std::printf("[  ISA     ] Avx512ScoresAndSoftmaxAreTheAvx2ArithmeticBitForBit: SKIPPED the avx512 path: this CPU or KVLM_ISA lacks it\n");
    return;
  }
  for (int hd : {8, 40, 64, 128, 256, 264})  // 264: groups not of 8s past the AVX-512 quads' 256
    for (int g : {4, 5, 7, 8, 12, 16})
      for (int n : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 97, 128, 200, 256}) {
        const size_t stride = static_cast<size_t>(hd) * 2 + 3;  // misaligned rows
        auto q = randn(static_cast<size_t>(g) * hd, 3 + n), k = randn(n * stride + 1, 4 + hd);
        const size_t acc_n = static_cast<size_t>(g) * hd;
        auto run = [&](Isa isa, std::vector<float>& s, std::vector<float>& ml, std::vector<float>& acc) {
          IsaScope scope(isa);
          s.assign(static_cast<size_t>(g) * n, 0.0f);
          attn_scores(q.data(), g, hd, 0.7f, k.data() + 1, stride, n, s.data(), n);
          for (int j = 0; j < n; j += 5) s[j] = -std::numeric_limits<float>::infinity();  // masked keys of head 0
          for (int j = 1; j < n; j += 7) s[n + j] -= 300.0f;                              // exp underflows to 0
          ml.assign(2 * g, 0.0f);
          acc.assign(acc_n, 0.25f);
          AttnState st{g, hd, ml.data(), ml.data() + g, acc.data()};
          for (int i = 0; i < g; ++i) ml[i] = 1.5f, ml[g + i] = 2.0f;  // an earlier span's state, rescaled
          attn_update(st, s.data(), n, n);
        };
        std::vector<float> s2, ml2, acc2, s5, ml5, acc5;
        run(Isa::Avx2, s2, ml2, acc2);
        run(Isa::Avx512, s5, ml5, acc5);
        ASSERT_EQ(std::memcmp(s2.data(), s5.data(), s2.size() * 4), 0) << "weights hd " << hd << " g " << g << " n " << n;
        ASSERT_EQ(std::memcmp(ml2.data(), ml5.data(), ml2.size() * 4), 0) << "max and sum hd " << hd << " g " << g << " n " << n;
        ASSERT_EQ(std::memcmp(acc2.data(), acc5.data(), acc2.size() * 4), 0) << "rescaled sums hd " << hd << " g " << g << " n " << n;
      }
}

TEST(IsaKernels, IntegerScoresMatchScalarTwinBitForBitAndTheDecodedKeys) {
  for_each_simd_isa([] {
    for (DType t : {DType::Int8, DType::Int4})
      for (int hd : {32, 64, 96, 128, 256})
        for (int g : {4, 7, 8, 12})
          for (int n : {1, 9, 16, 25, 40})
            for (int off : {0, 5}) {
              const int kvh = 2, h = 1;
              EncodedKv kv(t, kvh * hd, hd, n, off, hd + g + n);
              ASSERT_TRUE(integer_scores(kv.c, g));
              auto q = randn(static_cast<size_t>(g) * hd, 9 + g);
              QuantQuery qq;
              qq.prepare(t, q.data(), g, hd, 0.125f);
              std::vector<float> got(g * n), twin(g * n);
              attn_scores_quantized(qq, kv.head(h), n, got.data(), n);
              scalar::attn_scores_quantized(qq, kv.head(h), n, twin.data(), n);
              ASSERT_EQ(std::memcmp(got.data(), twin.data(), got.size() * 4), 0) << dtype_name(t) << " hd " << hd << " g " << g;
              expect_within_query_rounding(qq, kv, h, q, n, got);
            }
  });
  // The scalar twin itself, on any CPU.
  for (DType t : {DType::Int8, DType::Int4}) {
    EncodedKv kv(t, 128, 64, 20, 1, 3);
    auto q = randn(8 * 64, 4);
    QuantQuery qq;
    qq.prepare(t, q.data(), 8, 64, 1.0f);
    std::vector<float> twin(8 * 20);
    scalar::attn_scores_quantized(qq, kv.head(1), 20, twin.data(), 20);
    expect_within_query_rounding(qq, kv, 1, q, 20, twin);
  }
}

// Integer value sums of int8 and int4 rows: the SIMD paths against the scalar twin bit for bit,
// and both against the exact weighted sum within the weights' rounding: per block and group,
// |error| <= ws / 2 * sum_j |c_j| per element (plus float rounding), ws the largest weight (times
// the row's scale) over 127. int8: v = s * c, one scale a head; int4: v = s * nibble + z per group
// of 32 elements, the zero points' share exact in f32.
// A value-sum twin test's inputs: softmax-like weights of g heads (some zero, rows ps apart) and
// random accumulators, with two states over copies of them (s1 for the kernel, s2 for its twin).
struct ValueSumCase {
  std::vector<float> p, m, l, acc0, acc1, acc2;
  AttnState s1, s2;
  ValueSumCase(std::mt19937& rng, int g, int hd, size_t ps) : p(g * ps), m(g), l(g), acc0(static_cast<size_t>(g) * hd) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (auto& x : p) x = unit(rng) < 0.1f ? 0.0f : std::exp(-8.0f * unit(rng));
    for (auto& x : acc0) x = unit(rng) - 0.5f;
    acc1 = acc2 = acc0;
    s1 = {g, hd, m.data(), l.data(), acc1.data()};
    s2 = {g, hd, m.data(), l.data(), acc2.data()};
  }
};

TEST(IsaKernels, IntegerValueSumsMatchScalarTwinBitForBitAndTheExactSums) {
  auto check = [](bool simd) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255);
    for (DType t : {DType::Int8, DType::Int4})
      for (int hd : {32, 64, 96, 128, 256})
        for (int g : {4, 7, 8, 12})
          for (int n : {1, 5, 32, 37, 100}) {
            const bool i8 = t == DType::Int8;
            const int row_bytes = i8 ? hd : hd / 2, n_prm = i8 ? 1 : 2 * (hd / 32);
            // Rows misaligned by 31 bytes, every byte value; parameters from offset 1: int8 scales
            // positive, int4 (scale, zero point) pairs with positive scales and zero points of either sign.
            std::vector<uint8_t> bytes(static_cast<size_t>(n) * row_bytes + 31);
            for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
            std::vector<float> params(static_cast<size_t>(n) * n_prm + 1);
            for (size_t x = 0; x < params.size(); ++x) params[x] = i8 || x % 2 == 1 ? 0.01f + unit(rng) : unit(rng) - 0.5f;
            std::vector<const uint8_t*> rows(n);
            std::vector<const float*> prm(n);
            for (int j = 0; j < n; ++j)
              rows[j] = bytes.data() + 31 + static_cast<size_t>(j) * row_bytes, prm[j] = params.data() + 1 + static_cast<size_t>(j) * n_prm;
            const size_t ps = n + 3;
            ValueSumCase vc(rng, g, hd, ps);
            const std::vector<float>&p = vc.p, &acc0 = vc.acc0, &acc1 = vc.acc1, &acc2 = vc.acc2;
            AttnState &s1 = vc.s1, &s2 = vc.s2;
            if (simd) attn_accumulate_quantized(t, s1, p.data(), ps, rows.data(), prm.data(), n);
            else scalar::attn_accumulate_quantized(t, s1, p.data(), ps, rows.data(), prm.data(), n);
            scalar::attn_accumulate_quantized(t, s2, p.data(), ps, rows.data(), prm.data(), n);
            ASSERT_EQ(std::memcmp(acc1.data(), acc2.data(), acc1.size() * 4), 0)
                << dtype_name(t) << " hd " << hd << " g " << g << " n " << n;
            for (int i = 0; i < g; ++i)
              for (int d = 0; d < hd; ++d) {
                double exact = acc0[i * hd + d], bound = 1e-5 * (1 + std::fabs(acc0[i * hd + d]));
                for (int j0 = 0; j0 < n; j0 += kValueBlock) {
                  double wmax = 0, abs_c = 0, zabs = 0;
                  for (int j = j0; j < std::min(n, j0 + kValueBlock); ++j) {
                    const int c = i8 ? static_cast<int8_t>(rows[j][d]) : (rows[j][d / 2] >> (4 * (d % 2))) & 0xF;
                    const double sc = i8 ? prm[j][0] : prm[j][2 * (d / 32)], z = i8 ? 0.0 : prm[j][2 * (d / 32) + 1];
                    const double w = double(p[i * ps + j]) * sc;
                    exact += w * c + double(p[i * ps + j]) * z;
                    wmax = std::max(wmax, w), abs_c += std::abs(c), zabs += std::fabs(double(p[i * ps + j]) * z);
                  }
                  bound += 0.5 * wmax / 127 * abs_c * 1.001 + 1e-6 * (wmax * abs_c + zabs);
                }
                ASSERT_LE(std::fabs(acc1[i * hd + d] - exact), bound)
                    << dtype_name(t) << " hd " << hd << " g " << g << " n " << n << " head " << i;
              }
          }
  };
  for_each_simd_isa([&] { check(true); });
  check(false);  // the scalar twin itself against the exact sums, on any CPU
}

// The largest sums the value kernels can meet: every weight the block's maximum (codes 127), every
// int8 code -128 and every nibble 15, where the AVX2 int4 kernel sums a block in int16 lanes
// (8 quads x 2 x 127 x 15 = 30480). The SIMD sums must equal the scalar twin's and the exact
// 127 x 32 x code per element.
TEST(IsaKernels, IntegerValueSumsAtTheirLargestAreExact) {
  for_each_simd_isa([] {
    for (DType t : {DType::Int8, DType::Int4})
      for (int hd : {32, 64, 256}) {
        const bool i8 = t == DType::Int8;
        const int n = 64, g = 8, row_bytes = i8 ? hd : hd / 2, n_prm = i8 ? 1 : 2 * (hd / 32);
        std::vector<uint8_t> bytes(static_cast<size_t>(n) * row_bytes, i8 ? 0x80 : 0xFF);
        std::vector<float> params(static_cast<size_t>(n) * n_prm);
        for (size_t x = 0; x < params.size(); ++x) params[x] = i8 || x % 2 == 0 ? 1.0f : 0.0f;  // scale 1, zero point 0
        std::vector<const uint8_t*> rows(n);
        std::vector<const float*> prm(n);
        for (int j = 0; j < n; ++j) rows[j] = bytes.data() + static_cast<size_t>(j) * row_bytes, prm[j] = params.data() + static_cast<size_t>(j) * n_prm;
        std::vector<float> p(static_cast<size_t>(g) * n, 0.5f), m(g), l(g), acc1(static_cast<size_t>(g) * hd), acc2(acc1.size());
        AttnState s1{g, hd, m.data(), l.data(), acc1.data()}, s2{g, hd, m.data(), l.data(), acc2.data()};
        attn_accumulate_quantized(t, s1, p.data(), n, rows.data(), prm.data(), n);
        scalar::attn_accumulate_quantized(t, s2, p.data(), n, rows.data(), prm.data(), n);
        ASSERT_EQ(std::memcmp(acc1.data(), acc2.data(), acc1.size() * 4), 0) << dtype_name(t) << " hd " << hd;
        // Two blocks, each weighed by ws = 0.5 / 127 over 32 codes of 127: 2 x 0.5 x 32 x code.
        const float expect = 32.0f * (i8 ? -128.0f : 15.0f);
        for (float x : acc1) ASSERT_EQ(x, expect) << dtype_name(t) << " hd " << hd;
      }
  });
}

// bf16 rows with bf16 products (attention_bf16.h): the SIMD kernels against the scalar twins bit
// for bit, and both against float64 sums of the decoded rows: only the rounding of the query (or
// of the weights) to bf16 differs, at most 2^-8 of each element, so |error| <= 2^-8 * sum |q k|
// (sum |p v|) plus float rounding.
TEST(IsaKernels, Bf16ProductsMatchScalarTwinBitForBitAndTheDecodedRows) {
  int ran = 0;  // calls where the AVX-512 BF16 kernels ran
  auto check = [&](bool simd) {
    std::mt19937 rng(11);
    for (int hd : {32, 64, 96, 128, 256})
      for (int g : {4, 5, 8, 13, 16})
        for (int n : {1, 15, 16, 17, 37}) {
          const int kvh = 3, h = 2, off = 2;  // the last head's rows, 2 bytes off a line
          EncodedKv kv(DType::BF16, kvh * hd, hd, n, off, hd * 7 + g + n);
          auto q = randn(static_cast<size_t>(g) * hd, 9 + g);
          std::vector<uint16_t> qb(q.size());
          round_query_bf16(q.data(), static_cast<int>(q.size()), qb.data());
          auto dk = kv.decoded(h, n);
          const size_t ss = n + 3;
          std::vector<float> got(g * ss, -1.0f), twin(g * ss, -1.0f);
          ran += simd && bf16_products_vectorized(kv.c);
          if (simd) attn_scores_bf16(qb.data(), g, hd, 0.3f, kv.head(h), n, got.data(), ss);
          else scalar::attn_scores_bf16(qb.data(), g, hd, 0.3f, kv.head(h), n, got.data(), ss);
          scalar::attn_scores_bf16(qb.data(), g, hd, 0.3f, kv.head(h), n, twin.data(), ss);
          ASSERT_EQ(std::memcmp(got.data(), twin.data(), got.size() * 4), 0) << "scores hd " << hd << " g " << g << " n " << n;
          for (int i = 0; i < g; ++i)
            for (int j = 0; j < n; ++j) {
              double exact = 0, mag = 0;
              for (int d = 0; d < hd; ++d) {
                const double t = double(q[i * hd + d]) * dk[j * hd + d];
                exact += t, mag += std::fabs(t);
              }
              ASSERT_LE(std::fabs(got[i * ss + j] - 0.3 * exact), 0.3 * mag * (std::ldexp(1.0, -8) + 1e-6))
                  << "hd " << hd << " g " << g << " head " << i << " key " << j;
            }
          ValueSumCase vc(rng, g, hd, ss);
          const std::vector<float>&p = vc.p, &acc0 = vc.acc0, &acc1 = vc.acc1, &acc2 = vc.acc2;
          AttnState &s1 = vc.s1, &s2 = vc.s2;
          if (simd) attn_accumulate_bf16(s1, p.data(), ss, kv.head(h), n);
          else scalar::attn_accumulate_bf16(s1, p.data(), ss, kv.head(h), n);
          scalar::attn_accumulate_bf16(s2, p.data(), ss, kv.head(h), n);
          ASSERT_EQ(std::memcmp(acc1.data(), acc2.data(), acc1.size() * 4), 0) << "values hd " << hd << " g " << g << " n " << n;
          for (int i = 0; i < g; ++i)
            for (int d = 0; d < hd; ++d) {
              double exact = acc0[i * hd + d], mag = std::fabs(exact);
              for (int j = 0; j < n; ++j) {
                const double t = double(p[i * ss + j]) * dk[j * hd + d];
                exact += t, mag += std::fabs(t);
              }
              ASSERT_LE(std::fabs(acc1[i * hd + d] - exact), mag * (std::ldexp(1.0, -8) + 1e-6))
                  << "values hd " << hd << " g " << g << " head " << i;
            }
        }
  };
  for_each_simd_isa([&] { check(true); });
  check(false);  // the scalar twin itself against the float64 sums, on any CPU
  if (cpu_features().avx512_bf16 && static_cast<int>(active_isa()) >= static_cast<int>(Isa::Avx512)) {
    EXPECT_GT(ran, 0);
  } else {
    std::printf("[  ISA     ] Bf16ProductsMatchScalarTwinBitForBitAndTheDecodedRows: SKIPPED the avx512_bf16 kernels: this CPU lacks avx512_bf16\n");
  }
}

TEST(IsaKernels, RowQuantDotsMatchScalarTwinAndDequantizedValues) {
  int stored_kernels = 0;
  for_each_simd_isa([&] {
    for (DType type : test::kRowQuantTypes)
      for (int in : {96, 256, 512, 800, 2304})  // 96, 800: a last run of groups short of 8
        for (int off = 0; off < 3; ++off) {
          if (in % static_cast<int>(dtype_block(type)) != 0) continue;
          SCOPED_TRACE(std::string(dtype_name(type)) + " in " + std::to_string(in) + " off " + std::to_string(off));
          const int n = 5;  // one call of 4 tokens and one of 1
          auto w = test::random_row_quant(type, 1, in, in + off);
          std::vector<uint8_t> shifted(w.size() + off);  // misaligned rows
          std::copy(w.begin(), w.end(), shifted.begin() + off);
          auto x = randn(static_cast<size_t>(n) * in, 7 + in);
          QuantizedActs acts;  // in the row's blocks: 32, or a super-block's 256
          acts.quantize(x.data(), n, in, nullptr, static_cast<int>(dtype_block(type)));
          RowQuants u(type, in), twin(type, in);
          unpack_row(shifted.data() + off, u);
          scalar::unpack_row(w.data(), twin);
          ASSERT_EQ(std::memcmp(u.q, twin.q, in), 0);
          ASSERT_EQ(std::memcmp(u.scale, twin.scale, in / 16 * 2), 0);
          ASSERT_EQ(std::memcmp(u.min, twin.min, in / 16 * 2), 0);
          ASSERT_EQ(std::memcmp(u.scale_lanes, twin.scale_lanes, in / 2 * 2), 0);
          ASSERT_EQ(std::memcmp(u.d, twin.d, in / 32 * 4), 0);
          ASSERT_EQ(std::memcmp(u.m, twin.m, in / 32 * 4), 0);
          float got[n], want[n];
          row_dot(u, acts, 0, 4, got);
          row_dot(u, acts, 4, 1, got + 4);
          scalar::row_dot(twin, acts, 0, n, want);
          ASSERT_EQ(std::memcmp(got, want, sizeof got), 0) << got[0] << " vs " << want[0];
          // Straight from the stored row (decode's kernel, where the type has one): the same bits.
          for (int t = 0; t < n; ++t) {
            float stored;
            if (row_dot_stored(type, shifted.data() + off, in, acts, t, &stored)) {
              ++stored_kernels;
              ASSERT_EQ(std::memcmp(&stored, &want[t], 4), 0) << "stored-row kernel, token " << t;
            }
          }
          // Against the values themselves (ggml's decoder, checked against the gguf package):
          // the only difference is the activations' Q8_0 rounding.
          std::vector<float> wf(in);
          dequantize(type, w.data(), wf.data(), in);
          for (int t = 0; t < n; ++t) {
            double ref = 0, mag = 0;
            for (int i = 0; i < in; ++i) {
              const double xv = acts.q[static_cast<size_t>(t) * in + i] * static_cast<double>(acts.d[t * acts.nb + i / acts.block]);
              ref += wf[i] * xv;
              mag += std::fabs(wf[i] * xv);
            }
            EXPECT_NEAR(got[t], ref, 1e-5 * mag + 1e-6) << "token " << t;
          }
        }
  });
  if (static_cast<int>(active_isa()) >= static_cast<int>(Isa::Avx2)) {
    EXPECT_GT(stored_kernels, 0);  // Q4_K's stored-row kernel ran
  }
}

TEST(IsaKernels, StoredQ8RowsPackIntoTheSameGroupAsTheScalarTwin) {
  for_each_simd_isa([] {
    for (int nb : {1, 2, 7, 64})
      for (int off = 0; off < 3; ++off) {
        const int in = nb * 32;
        auto wf = randn(static_cast<size_t>(kGroupRows) * in, nb + off);
        std::vector<uint8_t> rows(kGroupRows * dtype_row_bytes(DType::Q8_0, in, "test") + off);
        dtype_traits(DType::Q8_0).from_float(wf.data(), rows.data() + off, wf.size());
        std::vector<uint8_t> got(q_group_bytes(DType::Q8_0, nb)), want(got.size());
        pack_gguf_group(DType::Q8_0, rows.data() + off, kGroupRows, in, got.data());
        scalar::pack_gguf_group(DType::Q8_0, rows.data() + off, kGroupRows, in, want.data());
        ASSERT_EQ(got, want) << "nb " << nb << " off " << off;
      }
  });
}

TEST(IsaKernels, PackedQuantizedGemmMatchesScalarTwinAtEveryIsa) {
  for_each_simd_isa([] {
    for (DType f : {DType::Q8_0, DType::Q4_0})
      for (int nb = 1; nb <= 17; nb += 4)
        for (int off = 0; off < 3; ++off) {
          const int in = nb * 32, n = 5;
          auto w = randn(static_cast<size_t>(kGroupRows) * in, nb + 50), x = randn(static_cast<size_t>(n) * in, 200 + nb);
          auto packed = pack_quantized(f, w.data(), kGroupRows, in);
          std::vector<uint8_t> shifted(packed.size() + off);
          std::copy(packed.begin(), packed.end(), shifted.begin() + off);
          QuantizedActs acts;
          acts.quantize(x.data(), n, in);
          for (int nt = 1; nt <= 4; ++nt) {
            float got[4][kGroupRows], ref[4][kGroupRows];
            qgemm_group(f, shifted.data() + off, acts, 1, nt, got);
            scalar::qgemm_group(f, packed.data(), acts, 1, nt, ref);
            ASSERT_EQ(std::memcmp(got, ref, sizeof(float) * kGroupRows * nt), 0)
                << dtype_name(f) << " nb " << nb << " nt " << nt << " off " << off;
          }
        }
  });
}

}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {
// A layer of type f gives each of 11 tokens the same values whether it runs alone or among
// many: the cache's decode must equal a prefill bit for bit.
void expect_alone_equals_batch(DType f, int out, int in) {
  Linear l;
  l.out = out;
  l.in = in;
  auto w = randn(static_cast<size_t>(out) * in, out + in);
  l.w.assign(w.begin(), w.end());
  l.b = randn(out, 3);
  ASSERT_TRUE(l.convert(f));
  const int n = 11;
  auto x = randn(static_cast<size_t>(n) * in, 9);
  std::vector<float> batch(static_cast<size_t>(n) * out), alone(out);
  l.forward(x.data(), n, batch.data());
  for (int t = 0; t < n; ++t) {
    l.forward(x.data() + static_cast<size_t>(t) * in, 1, alone.data());
    for (int i = 0; i < out; ++i)
      ASSERT_EQ(alone[i], batch[static_cast<size_t>(t) * out + i])
          << dtype_name(f) << " out " << out << " in " << in << " t " << t << " row " << i;
  }
}

// Q8_0: token tiles of 1 to 4 over packed groups of 8 rows.
TEST(IsaKernels, Q8LinearGivesEachTokenTheSameValuesAloneOrInABatch) {
  for (int out : {5, 8, 37, 64})
    for (int in : {32, 64, 96}) expect_alone_equals_batch(DType::Q8_0, out, in);
}

// Stored halves: tiles of 3 rows x 4 tokens in prefill, 4 rows x 1 in decode.
TEST(IsaKernels, HalfLinearGivesEachTokenTheSameValuesAloneOrInABatch) {
  for (DType f : {DType::F16, DType::BF16})
    for (int out : {5, 64, 301})
      for (int in : {24, 96, 2048}) expect_alone_equals_batch(f, out, in);
}
}  // namespace
}  // namespace kvlm

namespace kvlm {
namespace {
// The many-token product over stored halves gives every (row, token) the row dot's value bit for
// bit (a decode step equals the prefill), over tile edges, blocks of rows, tails and misalignment;
// and stays near the in-order scalar sums.
TEST(IsaKernels, HalfRowsTimesTokensEqualTheRowDotBitForBit) {
  for_each_simd_isa([] {
    for (DType f : {DType::F16, DType::BF16})
      for (int in : {1, 8, 16, 37, 100, 4099})
        for (int rows : {1, 2, 5, 37})
          for (int n : {1, 5, 7}) {  // 4-row tiles of one token; tiles of 4 tokens, 1 or 3 left
            if (in > 100 && rows < 37) continue;  // 4,099 values: 12 rows a block, so four blocks
            auto wf = randn(static_cast<size_t>(rows) * in, in + rows), bias = randn(rows, 5);
            std::vector<uint16_t> w(static_cast<size_t>(rows) * in + 1);
            for (size_t i = 0; i < wf.size(); ++i) w[i + 1] = f == DType::F16 ? f32_to_f16(wf[i]) : f32_to_bf16(wf[i]);
            auto x = randn(static_cast<size_t>(n) * in + 1, 11 + in);
            const uint16_t* wp = w.data() + 1;  // both misaligned by one element
            const float* xp = x.data() + 1;
            for (int r0 : {0, 1})
              for (bool with_bias : {true, false}) {
                if (r0 >= rows) continue;
                std::vector<float> y(static_cast<size_t>(n) * rows, -1.0f);
                half_rows_times_tokens(f, wp, with_bias ? bias.data() : nullptr, in, r0, rows, xp, n, y.data(), rows);
                for (int t = 0; t < n; ++t)
                  for (int r = 0; r < rows; ++r) {
                    const float got = y[static_cast<size_t>(t) * rows + r];
                    if (r < r0) {
                      ASSERT_EQ(got, -1.0f) << "row " << r << " is outside the range asked for";
                      continue;
                    }
                    const uint16_t* wr = wp + static_cast<size_t>(r) * in;
                    const float* xt = xp + static_cast<size_t>(t) * in;
                    const float b = with_bias ? bias[r] : 0.0f;
                    const float dot = f == DType::F16 ? dot_f16(wr, xt, in) : dot_bf16(wr, xt, in);
                    const float twin = f == DType::F16 ? scalar::dot_f16(wr, xt, in) : scalar::dot_bf16(wr, xt, in);
                    const float want = dot + b;
                    ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
                        << dtype_name(f) << " in " << in << " rows " << rows << " r " << r << " t " << t << ": " << got
                        << " vs " << want;
                    ASSERT_NEAR(got, twin + b, 1e-4f * std::sqrt(static_cast<float>(in)) * 4);
                  }
              }
          }
  });
}

}  // namespace
}  // namespace kvlm
