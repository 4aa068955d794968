// The AMX tile multiply against the scalar twin, bit for bit, and the layers built on it: a token's
// outputs are the same whether its batch took the tiles or the vector kernels. The int8 attention
// of several KV heads at once (on tiles where the CPU has them; int4 a head at a time) against the
// scalar twin a head at a time, bit for bit. Where this CPU (or KVLM_ISA) has no AMX, the tile
// checks print SKIPPED naming the ISA, and the layer and attention checks still run on the vector
// path.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "kernels/attention_int.h"
#include "kernels/kv_quant.h"
#include "kernels/dtype.h"
#include "kernels/ggml_quantize.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "kernels/qgemm_amx.h"
#include "kernels/row_tiles.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

// memcmp's pointers must not be null even for zero bytes, and an empty Buffer's data() is.
template <class T>
bool same_bytes(const Buffer<T>& a, const Buffer<T>& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool amx_or_say_skipped() {
  if (amx_usable()) {
    std::printf("[  ISA     ] %s: testing the amx path\n", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    return true;
  }
  std::printf("[  ISA     ] %s: SKIPPED the amx path: %s\n", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
              cpu_features().amx_int8 ? "KVLM_ISA caps below it" : "this CPU (or its OS) lacks AMX-INT8");
  return false;
}

// Weights with every block's extremes present: the largest quants (+-127, nibbles 0 and 15)
// meet the largest activations, where an int8 product or an int32 sum would show a wrong sign.
std::vector<float> weights_with_extremes(int rows, int in, uint64_t seed) {
  auto w = randn(static_cast<size_t>(rows) * in, seed);
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < in / 32; ++b) {
      w[static_cast<size_t>(r) * in + b * 32 + (r + b) % 32] = 9.0f;
      w[static_cast<size_t>(r) * in + b * 32 + (r + 3 * b + 7) % 32] = -9.0f;
    }
  return w;
}

TEST(AmxKernels, TileMultiplyEqualsTheScalarTwinBitForBit) {
  if (!amx_or_say_skipped()) return;
  for (DType f : {DType::Q8_0, DType::Q4_0})
    for (int nb : {1, 2, 7, 64, 176})
      for (int groups : {1, 2})
        for (int off : {0, 1, 3}) {  // packed weights misaligned by off bytes
          const int in = nb * 32, rows = groups * kGroupRows, n = 37;
          auto w = weights_with_extremes(rows, in, 10 * nb + groups);
          auto x = randn(static_cast<size_t>(n) * in, 300 + nb);
          x[5] = 50.0f;  // one token's block quantizes to +-127 at its largest
          auto packed = pack_quantized(f, w.data(), rows, in);
          std::vector<uint8_t> shifted(packed.size() + off);
          std::copy(packed.begin(), packed.end(), shifted.begin() + off);
          QuantizedActs acts;
          acts.quantize(x.data(), n, in);
          const size_t gbytes = q_group_bytes(f, nb);
          AmxGroupPair pair(f, shifted.data() + off, groups, nb);
          for (int t0 : {0, 5, n - kAmxTokens}) {
            float got[kAmxTokens][kAmxRows];
            pair.multiply(acts, t0, got);
            for (int g = 0; g < groups; ++g)
              for (int t = 0; t < kAmxTokens; t += 4) {
                float want[4][kGroupRows];
                scalar::qgemm_group(f, packed.data() + g * gbytes, acts, t0 + t, 4, want);
                for (int k = 0; k < 4; ++k)
                  ASSERT_EQ(std::memcmp(&got[t + k][g * kGroupRows], want[k], sizeof want[k]), 0)
                      << dtype_name(f) << " nb " << nb << " groups " << groups << " off " << off << " t0 " << t0
                      << " token " << t + k << " group " << g << ": " << got[t + k][g * kGroupRows] << " vs "
                      << want[k][0];
              }
          }
        }
}

TEST(AmxKernels, RefusesWhatItCannotMultiply) {
  if (!amx_or_say_skipped()) return;
  std::vector<uint8_t> group(q_group_bytes(DType::Q8_0, 2));
  EXPECT_THROW(AmxGroupPair(DType::Q8_0, group.data(), 3, 2), std::exception);
  EXPECT_THROW(AmxGroupPair(DType::F16, group.data(), 1, 2), std::exception);
  AmxGroupPair pair(DType::Q8_0, group.data(), 1, 2);
  QuantizedActs acts;
  auto x = randn(20 * 64, 1);
  acts.quantize(x.data(), 20, 64);
  float out[kAmxTokens][kAmxRows];
  EXPECT_THROW(pair.multiply(acts, 5, out), std::exception);  // tokens 5..20 run past the 20
}

// A quantized layer gives each token the same outputs alone (the vector kernels, as a decode step
// runs) or in batches of any size (tiles of 16 and the tokens left over), at every row count:
// so a prefill and the decode steps after it agree bit for bit.
TEST(AmxKernels, QuantizedLayerGivesATokenTheSameValuesInAnyBatch) {
  amx_or_say_skipped();  // without tiles this checks the vector path alone
  for (DType f : {DType::Q8_0, DType::Q4_0})
    for (int out : {5, 8, 16, 24, 37})
      for (int in : {32, 96, 320}) {
        Linear l;
        l.out = out;
        l.in = in;
        auto w = weights_with_extremes(out, in, out * 7 + in);
        l.w.assign(w.begin(), w.end());
        l.b = randn(out, 3);
        ASSERT_TRUE(l.convert(f));
        const int n = 37;
        auto x = randn(static_cast<size_t>(n) * in, 9 + in);
        std::vector<float> alone(static_cast<size_t>(n) * out);
        for (int t = 0; t < n; ++t) l.forward(x.data() + static_cast<size_t>(t) * in, 1, alone.data() + static_cast<size_t>(t) * out);
        for (int batch : {16, 17, 32, 37}) {
          std::vector<float> y(static_cast<size_t>(batch) * out);
          l.forward(x.data(), batch, y.data());
          for (int t = 0; t < batch; ++t)
            for (int r = 0; r < out; ++r)
              ASSERT_EQ(y[static_cast<size_t>(t) * out + r], alone[static_cast<size_t>(t) * out + r])
                  << dtype_name(f) << " out " << out << " in " << in << " batch " << batch << " token " << t << " row " << r;
        }
      }
}

// The row-quant types' tile multiply (kernels/row_tiles.h): the packed tiles equal the scalar
// packer's byte for byte (folded for AMX, unfolded for AVX-512 and AVX2), the tile kernel and the AVX-512 and
// AVX2 ones equal the scalar twin bit for bit, and all equal the
// dequantized values' dot but for the activations' rounding. Every type; 16 rows and a short
// group; rows misaligned; a row at its largest levels against tokens at the activations'
// extremes (where an int16 sum would overflow); n not a multiple of 16.
TEST(AmxKernels, RowQuantTilesEqualTheScalarTwinBitForBit) {
  const bool amx = amx_or_say_skipped();  // without tiles: the scalar twin against the values
  for (const Isa isa : {Isa::Avx512, Isa::Avx2})
    std::printf("[  ISA     ] row tiles: %s the %s path\n", isa_at_least(isa) ? "testing" : "SKIPPED (this CPU lacks it)", isa_name(isa));
  for (DType type : test::kRowQuantTypes)
    for (int in : {96, 256, 800, 2304})
      for (int rows : {16, 5}) {
        const int block = static_cast<int>(dtype_block(type));
        if (in % block != 0) continue;
        SCOPED_TRACE(std::string(dtype_name(type)) + " in " + std::to_string(in) + " rows " + std::to_string(rows));
        const size_t row_bytes = dtype_row_bytes(type, in, "test row");
        auto w = test::random_row_quant(type, rows, in, in + rows);
        {  // row 0 at the largest levels of one sign (one value per 16 the other way sets the scale)
          std::vector<float> v(in);
          for (int i = 0; i < in; ++i) v[i] = i % 16 == 0 ? -1.0f : 0.97f;
          quantize_blocks(type, v.data(), w.data(), in);
        }
        std::vector<uint8_t> shifted(w.size() + 3);
        std::copy(w.begin(), w.end(), shifted.begin() + 3);
        const int n = 37;
        auto x = randn(static_cast<size_t>(n) * in, 11 + in);
        for (int i = 0; i < in; ++i) x[static_cast<size_t>(4) * in + i] = i % 2 ? 90.0f : -90.0f;  // +-127 throughout
        for (int i = 0; i < in; ++i) x[static_cast<size_t>(5) * in + i] = 90.0f;  // 127 throughout: against row 0,
        for (int i = 0; i < in; ++i) x[static_cast<size_t>(6) * in + i] = -90.0f;  // every product of one sign
        QuantizedActs acts;
        acts.quantize(x.data(), n, in, nullptr, block, kTileTokens);
        ASSERT_EQ(acts.n_padded, 48);
        std::vector<float> sums(static_cast<size_t>(acts.n_padded) * acts.nb);
        if (block == 32) row_tile_act_sums(acts, sums.data());
        RowQuants u(type, in);
        RowTiles twin, twin_unfolded;
        std::vector<float> want(static_cast<size_t>(acts.n_padded) * kTileRows);
        {
          IsaScope scalar_only(Isa::Scalar);
          twin.pack(shifted.data() + 3, rows, row_bytes, u, TileLayout::Folded);
          scalar::row_tile_multiply(twin, acts, sums.data(), want.data());
          // the unfolded layout holds the same integers: the same sums, the same bits
          twin_unfolded.pack(shifted.data() + 3, rows, row_bytes, u, TileLayout::Unfolded);
          std::vector<float> again(want.size());
          scalar::row_tile_multiply(twin_unfolded, acts, sums.data(), again.data());
          ASSERT_EQ(std::memcmp(again.data(), want.data(), want.size() * 4), 0);
        }
        // each ISA packs its own tiles (the same bytes) and multiplies them: AMX, then the same
        // layout a quad at a time with the tiles (and AVX-512) capped off
        for (const Isa isa : {Isa::Amx, Isa::Avx512, Isa::Avx2}) {
          if (isa == Isa::Amx ? !amx : !isa_at_least(isa)) continue;
          IsaScope cap(isa);
          RowTiles tiles;
          tiles.pack(shifted.data() + 3, rows, row_bytes, u);
          const RowTiles& same = tiles.layout == TileLayout::Unfolded ? twin_unfolded : twin;
          ASSERT_TRUE(same_bytes(tiles.q, same.q)) << isa_name(isa);
          ASSERT_TRUE(same_bytes(tiles.sv, same.sv));
          ASSERT_TRUE(same_bytes(tiles.mn, same.mn));
          ASSERT_TRUE(same_bytes(tiles.mins, same.mins));  // empty for types without mins
          ASSERT_TRUE(same_bytes(tiles.sub_scales, same.sub_scales));
          ASSERT_TRUE(same_bytes(tiles.scale_pairs, same.scale_pairs));
          if (isa == Isa::Avx2 && !row_tiles_usable(type)) continue;  // IQ4_NL: the generic path
          std::vector<float> got(want.size());
          row_tile_multiply(tiles, acts, sums.data(), got.data());
          for (size_t k = 0; k < got.size(); ++k)
            ASSERT_EQ(std::memcmp(&got[k], &want[k], 4), 0) << isa_name(isa) << ": token " << k / kTileRows << " row "
                                                            << k % kTileRows << ": " << got[k] << " vs " << want[k];
        }
        std::vector<float> wf(static_cast<size_t>(rows) * in);
        dequantize(type, w.data(), wf.data(), wf.size());
        for (int t = 0; t < acts.n_padded; ++t)
          for (int r = 0; r < kTileRows; ++r) {
            double ref = 0, mag = 0;
            for (int i = 0; r < rows && i < in; ++i) {
              const double xv = acts.q[static_cast<size_t>(t) * in + i] * static_cast<double>(acts.d[t * acts.nb + i / block]);
              ref += wf[static_cast<size_t>(r) * in + i] * xv;
              mag += std::fabs(wf[static_cast<size_t>(r) * in + i] * xv);
            }
            ASSERT_NEAR(want[static_cast<size_t>(t) * kTileRows + r], ref, 1e-5 * mag + 1e-6) << "token " << t << " row " << r;
          }
      }
}

// Scores of KV heads [1, 1 + heads) of rows holding heads + 2 of them, misaligned by 5 bytes,
// against the scalar twin one head at a time; the scores are scattered (s_stride and s_head
// leave gaps, NaN before and after) to show each lands where it should and nothing else is
// written. Groups of 4, 5-8 and 9-16 heads share a tile between 4, 2 and 1 KV heads; n leaves
// key tails under 16.
TEST(AmxKernels, IntegerScoresOfSeveralHeadsEqualTheScalarTwinBitForBit) {
  amx_or_say_skipped();  // without tiles this checks the heads one at a time on the vector path
  for (DType t : {DType::Int8, DType::Int4})
    for (int g : {4, 5, 8, 12, 16})
      for (int hd : {64, 128, 256})
        for (int heads : {1, 2, 3, 5})
          for (int n : {1, 15, 16, 17, 40, 64}) {
            const KvRowCodec c{t, (heads + 2) * hd, hd};
            std::vector<uint8_t> raw(c.data_bytes() * n + 5);
            std::vector<float> params(static_cast<size_t>(c.n_params()) * n);
            auto x = randn(static_cast<size_t>(c.kv_dim) * n, g + hd + n);
            for (int j = 0; j < n; ++j)
              c.encode(x.data() + static_cast<size_t>(j) * c.kv_dim, raw.data() + 5 + j * c.data_bytes(),
                       params.data() + j * c.n_params());
            std::vector<QuantQuery> qq(heads);
            for (int h = 0; h < heads; ++h) {
              auto q = randn(static_cast<size_t>(g) * hd, 100 + h);
              qq[h].prepare(t, q.data(), g, hd, 0.125f);
            }
            const size_t s_stride = n + 3, s_head = g * s_stride + 7;
            std::vector<float> got(heads * s_head + 9, std::numeric_limits<float>::quiet_NaN()), twin = got;
            attn_scores_quantized_heads(qq.data(), heads, EncodedRows{&c, raw.data() + 5, params.data(), 1}, n,
                                        got.data() + 4, s_stride, s_head);
            for (int h = 0; h < heads; ++h)
              scalar::attn_scores_quantized(qq[h], EncodedRows{&c, raw.data() + 5, params.data(), 1 + h}, n,
                                            twin.data() + 4 + h * s_head, s_stride);
            ASSERT_EQ(std::memcmp(got.data(), twin.data(), got.size() * 4), 0)
                << dtype_name(t) << " g " << g << " hd " << hd << " heads " << heads << " n " << n;
          }
}

// Value sums of KV heads [1, 1 + heads) at once against the scalar twin one head at a time:
// every byte value in the rows (misaligned by 3), positive scales (int4: zero points of either
// sign), softmax-like weights with zeros; blocks of 32 keys with tails. Groups under 8 heads take
// the vector path.
TEST(AmxKernels, IntegerValueSumsOfSeveralHeadsEqualTheScalarTwinBitForBit) {
  amx_or_say_skipped();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (DType t : {DType::Int8, DType::Int4})
    for (int g : {4, 8, 12, 16})
      for (int hd : {64, 128, 256})
        for (int heads : {1, 2, 3})
          for (int n : {1, 5, 32, 37, 100}) {
            const bool i8 = t == DType::Int8;
            const int kvh = heads + 2, row_bytes = i8 ? hd : hd / 2, n_prm = i8 ? 1 : 2 * (hd / 32);
            std::vector<uint8_t> bytes(static_cast<size_t>(n) * kvh * row_bytes + 3);
            for (auto& b : bytes) b = static_cast<uint8_t>(rng());
            std::vector<float> params(static_cast<size_t>(n) * kvh * n_prm);
            for (size_t x = 0; x < params.size(); ++x)
              params[x] = i8 || x % 2 == 0 ? 0.01f + unit(rng) : unit(rng) - 0.5f;
            std::vector<const uint8_t*> rows(n);
            std::vector<const float*> prm(n);
            for (int j = 0; j < n; ++j)
              rows[j] = bytes.data() + 3 + (static_cast<size_t>(j) * kvh + 1) * row_bytes,
              prm[j] = params.data() + (static_cast<size_t>(j) * kvh + 1) * n_prm;
            const size_t ps = n + 3, p_head = g * ps + 5;
            std::vector<float> p(heads * p_head);
            for (auto& v : p) v = unit(rng) < 0.1f ? 0.0f : std::exp(-8.0f * unit(rng));
            std::vector<float> ml(2 * g, 1.0f), acc(static_cast<size_t>(heads) * g * hd), twin;
            for (auto& v : acc) v = unit(rng) - 0.5f;
            twin = acc;
            std::vector<AttnState> st, st2;
            for (int h = 0; h < heads; ++h) {
              st.push_back({g, hd, ml.data(), ml.data() + g, acc.data() + static_cast<size_t>(h) * g * hd});
              st2.push_back({g, hd, ml.data(), ml.data() + g, twin.data() + static_cast<size_t>(h) * g * hd});
            }
            attn_accumulate_quantized_heads(t, st.data(), heads, p.data(), ps, p_head, rows.data(), row_bytes,
                                            prm.data(), n_prm, n);
            for (int h = 0; h < heads; ++h) {
              std::vector<const uint8_t*> r(n);
              std::vector<const float*> q(n);
              for (int j = 0; j < n; ++j) r[j] = rows[j] + h * row_bytes, q[j] = prm[j] + h * n_prm;
              scalar::attn_accumulate_quantized(t, st2[h], p.data() + h * p_head, ps, r.data(), q.data(), n);
            }
            ASSERT_EQ(std::memcmp(acc.data(), twin.data(), acc.size() * 4), 0)
                << dtype_name(t) << " g " << g << " hd " << hd << " heads " << heads << " n " << n;
          }
}

}  // namespace
}  // namespace kvlm
