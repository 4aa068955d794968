// The AMX tile multiply against the scalar twin, bit for bit, and the layers built on it: a token's
// outputs are the same whether its batch took the tiles or the vector kernels. Where this CPU (or
// KVLM_ISA) has no AMX, the tile checks print SKIPPED naming the ISA, and the layer checks still
// run on the vector path.
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "kernels/dtype.h"
#include "kernels/linear.h"
#include "kernels/qgemm.h"
#include "kernels/qgemm_amx.h"
#include "test_support.h"

namespace kvlm {
namespace {

using test::randn;

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

}  // namespace
}  // namespace kvlm
