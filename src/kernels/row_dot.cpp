#include "kernels/row_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/ggml_blocks.h"
#include "kernels/row_unpack.h"

namespace kvlm {

namespace {
const BlockCodec& codec_of(DType t) {
  const BlockCodec* c = block_codec(t);
  KVLM_CHECK(c, dtype_name(t), " is not a row-quant type");
  return *c;
}
}  // namespace

bool is_row_quant(DType t) { return block_codec(t) != nullptr; }

RowQuants::RowQuants(DType t, int in_features) : type(t), in(in_features) {
  const BlockCodec& c = codec_of(t);
  KVLM_CHECK(in > 0 && in % c.values == 0, "a ", dtype_name(t), " row of ", in, " values");
  has_min = c.has_min;
  unsigned_q = c.unsigned_q;
  block = c.values;
  // Floats first (aligned as the buffer), then the int16s, then the int8 values.
  const size_t n32 = static_cast<size_t>(in) / 32, n16 = static_cast<size_t>(in) / 16;
  storage_ = Buffer<uint8_t>(2 * n32 * sizeof(float) + (2 * n16 + 16 * n32) * sizeof(int16_t) + static_cast<size_t>(in));
  d = reinterpret_cast<float*>(storage_.data());
  m = d + n32;
  scale_lanes = reinterpret_cast<int16_t*>(m + n32);
  scale = scale_lanes + 16 * n32;
  min = scale + n16;
  q = reinterpret_cast<int8_t*>(min + n16);
  // The 32-value types' sub-scales never change (a SIMD unpacker writes only q, d and m).
  if (c.values == 32)
    for (size_t s = 0; s < n16; ++s) {
      scale[s] = 1;
      min[s] = has_min ? 1 : 0;
    }
}

namespace scalar {
void unpack_row(const uint8_t* row, RowQuants& u) {
  const BlockCodec& c = codec_of(u.type);
  for (int b = 0; b < u.in / c.values; ++b) {
    const int v = b * c.values;
    c.unpack(row + static_cast<size_t>(b) * c.bytes,
             BlockOut{u.q + v, u.scale + v / 16, u.min + v / 16, u.d + v / 32, u.m + v / 32});
  }
  for (int g = 0; g < u.in / 32; ++g)
    for (int k = 0; k < 16; ++k) u.scale_lanes[16 * g + k] = u.scale[2 * g + k / 8];
}

void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out) {
  const int groups_per_span = u.block / 32;  // a span: one activation block
  for (int t = 0; t < nt; ++t) {
    const int8_t* xq = a.q.data() + static_cast<size_t>(t0 + t) * a.in;
    const float* xd = a.d.data() + static_cast<size_t>(t0 + t) * a.nb;
    const int16_t* xs = a.s16.data() + static_cast<size_t>(t0 + t) * (a.in / 16);
    float lane[8] = {}, mlane[8] = {};
    for (int sp = 0; sp < u.in / u.block; ++sp) {
      int32_t isum[8] = {};
      const int g0 = sp * groups_per_span;
      for (int g = g0; g < g0 + groups_per_span; ++g)
        for (int j = 0; j < 8; ++j) {
          int32_t sum = 0;
          for (int v = 32 * g + 4 * j; v < 32 * g + 4 * j + 4; ++v) sum += u.q[v] * xq[v];
          isum[j] += sum * u.scale[2 * g + j / 4];
        }
      // d and m are the same over a span (a 32-value block, or a K-quant's super-block).
      const float s = u.d[g0] * xd[sp];
      for (int j = 0; j < 8; ++j) lane[j] = std::fma(static_cast<float>(isum[j]), s, lane[j]);
      if (u.has_min) {
        const float ms = u.m[g0] * xd[sp];
        for (int g = g0; g < g0 + groups_per_span; ++g) {
          const int32_t msum = u.min[2 * g] * xs[2 * g] + u.min[2 * g + 1] * xs[2 * g + 1];
          mlane[g % 8] = std::fma(static_cast<float>(msum), ms, mlane[g % 8]);
        }
      }
    }
    out[t] = sum_8_lanes(lane) - sum_8_lanes(mlane);
  }
}
}  // namespace scalar

#if KVLM_X86
namespace {

template <int NT, bool Unsigned>
__attribute__((target("avx2,fma"))) void row_dot_avx2(const RowQuants& u, const QuantizedActs& a, int t0, float* out) {
  const int8_t* xq[NT];
  const float* xd[NT];
  const int16_t* xs[NT];
  __m256 acc[NT], macc[NT];
  alignas(32) float mlane[NT][8];
  for (int t = 0; t < NT; ++t) {
    xq[t] = a.q.data() + static_cast<size_t>(t0 + t) * a.in;
    xd[t] = a.d.data() + static_cast<size_t>(t0 + t) * a.nb;
    xs[t] = a.s16.data() + static_cast<size_t>(t0 + t) * (a.in / 16);
    acc[t] = macc[t] = _mm256_setzero_ps();
  }
  const int spans = u.in / u.block, groups_per_span = u.block / 32;
  for (int sp = 0; sp < spans; ++sp) {
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    const int g0 = sp * groups_per_span;
    for (int g = g0; g < g0 + groups_per_span; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 32 * g));
      // Signed values: |w| as the unsigned operand, w's sign moved onto x.
      const __m256i aw = Unsigned ? w : _mm256_sign_epi8(w, w);
      const __m256i sc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.scale_lanes + 16 * g));
      for (int t = 0; t < NT; ++t) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + 32 * g));
        // |w| * x pairs: at most 2 * 127 * 127, no saturation; then times the sixteen's scale.
        const __m256i p = _mm256_maddubs_epi16(aw, Unsigned ? x : _mm256_sign_epi8(x, w));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
      }
    }
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(u.d[g0] * xd[t][sp]), acc[t]);
      if (u.block == 256 && u.has_min) {  // the span's eight groups: lane g % 8 each
        const __m256i mn = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.min + 2 * g0));
        const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[t] + 2 * g0));
        macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn, sx)), _mm256_set1_ps(u.m[g0] * xd[t][sp]), macc[t]);
      }
    }
  }
  if (u.block == 32 && u.has_min)  // blocks of 32: eight at a time, lane g % 8 each, the rest one by one
    for (int t = 0; t < NT; ++t) {
      const int groups = u.in / 32;
      int g = 0;
      for (; g + 8 <= groups; g += 8) {
        const __m256i mn = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.min + 2 * g));
        const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[t] + 2 * g));
        const __m256 ms = _mm256_mul_ps(_mm256_loadu_ps(u.m + g), _mm256_loadu_ps(xd[t] + g));
        macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn, sx)), ms, macc[t]);
      }
      _mm256_store_ps(mlane[t], macc[t]);
      for (; g < groups; ++g) {
        const int32_t msum = u.min[2 * g] * xs[t][2 * g] + u.min[2 * g + 1] * xs[t][2 * g + 1];
        mlane[t][g % 8] = std::fma(static_cast<float>(msum), u.m[g] * xd[t][g], mlane[t][g % 8]);
      }
    }
  else
    for (int t = 0; t < NT; ++t) _mm256_store_ps(mlane[t], macc[t]);
  for (int t = 0; t < NT; ++t) {
    alignas(32) float lane[8];
    _mm256_store_ps(lane, acc[t]);
    out[t] = sum_8_lanes(lane) - sum_8_lanes(mlane[t]);
  }
}

using RowDotKernel = void (*)(const RowQuants&, const QuantizedActs&, int, float*);
// By unsigned_q, then nt - 1.
constexpr RowDotKernel kAvx2Kernels[2][4] = {
    {row_dot_avx2<1, false>, row_dot_avx2<2, false>, row_dot_avx2<3, false>, row_dot_avx2<4, false>},
    {row_dot_avx2<1, true>, row_dot_avx2<2, true>, row_dot_avx2<3, true>, row_dot_avx2<4, true>}};

}  // namespace
#endif  // KVLM_X86

void unpack_row(const uint8_t* row, RowQuants& u) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2) && unpack_row_avx2(row, u)) return;
#endif
  scalar::unpack_row(row, u);
}

bool row_dot_stored(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out) {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return row_dot_stored_avx2(type, row, in, a, t, out);
#endif
  (void)type, (void)row, (void)in, (void)a, (void)t, (void)out;
  return false;
}

void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out) {
  KVLM_CHECK(nt >= 1 && nt <= 4 && a.in == u.in && a.block == u.block, "row_dot of ", nt, " tokens of ", a.in,
             " values in blocks of ", a.block, " on a row of ", u.in, " in blocks of ", u.block);
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return kAvx2Kernels[u.unsigned_q][nt - 1](u, a, t0, out);
#endif
  scalar::row_dot(u, a, t0, nt, out);
}

}  // namespace kvlm
