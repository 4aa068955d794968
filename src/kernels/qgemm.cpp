#include "kernels/qgemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/linear.h"

namespace kvlm {

namespace {
constexpr size_t kScaleBytes = kGroupRows * sizeof(uint16_t);

// The packed layout in one place: row i's f16 scale, and where row i's chunk j (4 bytes) sits.
float row_scale(const uint8_t* blk, int i) {
  uint16_t h;
  std::memcpy(&h, blk + i * 2, 2);
  return f16_to_f32(h);
}
size_t chunk_offset(int i, int j) { return kScaleBytes + (static_cast<size_t>(j) * kGroupRows + i) * 4; }

int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

size_t q_block_bytes(DType f) {
  if (f == DType::Q8_0) return kScaleBytes + kGroupRows * 32;
  if (f == DType::Q4_0) return kScaleBytes + kGroupRows * 16;
  KVLM_CHECK(false, "q_block_bytes of a non-block format");
}

namespace {
// Puts one row's block (f16 scale, GGUF-ordered quants) into slot i of a packed 8-row block.
void place_block(uint8_t* blk, int i, uint16_t scale, const uint8_t* quants, size_t quant_bytes) {
  std::memcpy(blk + i * 2, &scale, 2);
  for (size_t j = 0; j < quant_bytes / 4; ++j)  // chunk j of 4 bytes lands at [j][row i]
    std::memcpy(blk + chunk_offset(i, static_cast<int>(j)), quants + j * 4, 4);
}
size_t quant_bytes(DType f) { return f == DType::Q4_0 ? 16 : 32; }
}  // namespace

Buffer<uint8_t> pack_quantized(DType f, const float* w, int out, int in) {
  const int nb = in / 32, groups = (out + kGroupRows - 1) / kGroupRows;
  const size_t bb = q_block_bytes(f), qb = quant_bytes(f);
  Buffer<uint8_t> packed(static_cast<size_t>(groups) * nb * bb, 0);
  std::vector<float> scales(nb);
  std::vector<uint8_t> quants(static_cast<size_t>(nb) * qb);
  for (int r = 0; r < out; ++r) {
    const float* row = w + static_cast<size_t>(r) * in;
    if (f == DType::Q4_0)
      quantize_row_q4_0(row, in, scales.data(), quants.data());
    else
      quantize_row_q8_0(row, in, scales.data(), reinterpret_cast<int8_t*>(quants.data()));
    for (int b = 0; b < nb; ++b)
      place_block(packed.data() + (static_cast<size_t>(r / kGroupRows) * nb + b) * bb, r % kGroupRows,
                  f32_to_f16(scales[b]), quants.data() + b * qb, qb);
  }
  return packed;
}

Buffer<uint8_t> pack_gguf_blocks(DType f, const uint8_t* rows, int out, int in) {
  const int nb = in / 32, groups = (out + kGroupRows - 1) / kGroupRows;
  const size_t bb = q_block_bytes(f), qb = quant_bytes(f), gguf_bytes = 2 + qb;
  Buffer<uint8_t> packed(static_cast<size_t>(groups) * nb * bb, 0);
  for (int r = 0; r < out; ++r)
    for (int b = 0; b < nb; ++b) {
      const uint8_t* src = rows + (static_cast<size_t>(r) * nb + b) * gguf_bytes;
      uint16_t scale;
      std::memcpy(&scale, src, 2);
      place_block(packed.data() + (static_cast<size_t>(r / kGroupRows) * nb + b) * bb, r % kGroupRows, scale, src + 2, qb);
    }
  return packed;
}

void unpack_to_f32(DType f, const uint8_t* packed, int out, int in, float* w) {
  const int nb = in / 32;
  const size_t bb = q_block_bytes(f);
  for (int r = 0; r < out; ++r)
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = packed + (static_cast<size_t>(r / kGroupRows) * nb + b) * bb;
      const int i = r % kGroupRows;
      const float d = row_scale(blk, i);
      float* y = w + static_cast<size_t>(r) * in + b * 32;
      for (int j = 0; j < static_cast<int>(quant_bytes(f) / 4); ++j)
        for (int k = 0; k < 4; ++k) {
          const uint8_t byte = blk[chunk_offset(i, j) + k];
          if (f == DType::Q4_0) {
            y[4 * j + k] = static_cast<float>((byte & 0xF) - 8) * d;
            y[16 + 4 * j + k] = static_cast<float>((byte >> 4) - 8) * d;
          } else {
            y[4 * j + k] = static_cast<float>(static_cast<int8_t>(byte)) * d;
          }
        }
    }
}

void QuantizedActs::quantize(const float* x, int n_tokens, int in_features, ThreadPool* pool) {
  n = n_tokens;
  in = in_features;
  nb = in / 32;
  d.resize(static_cast<size_t>(n) * nb);
  q.resize(static_cast<size_t>(n) * in);
  x8.resize(static_cast<size_t>(n) * nb);
  auto rows = [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      quantize_row_q8_0(x + t * in, in, d.data() + t * nb, q.data() + t * in);
      for (size_t b = t * nb; b < (t + 1) * nb; ++b) {
        int s = 0;
        for (int k = 0; k < 32; ++k) s += q[b * 32 + k];
        x8[b] = 8.0f * static_cast<float>(s);
      }
    }
  };
  // A prefill's activations are megabytes: quantizing them on one thread showed in profiles.
  if (n >= 16)
    (pool ? *pool : ThreadPool::global()).parallel_for(n, rows);
  else
    rows(0, n);
}

namespace scalar {
void qgemm_group(DType f, const uint8_t* group, const QuantizedActs& a, int t0, int nt, float out[][kGroupRows]) {
  const bool q4 = f == DType::Q4_0;
  const size_t bb = q_block_bytes(f);
  for (int t = 0; t < nt; ++t)
    for (int i = 0; i < kGroupRows; ++i) {
      float acc = 0.0f;
      for (int b = 0; b < a.nb; ++b) {
        const uint8_t* blk = group + b * bb;
        const int8_t* xq = a.q.data() + static_cast<size_t>(t0 + t) * a.in + b * 32;
        const float scale = row_scale(blk, i) * a.d[static_cast<size_t>(t0 + t) * a.nb + b];
        int32_t s = 0;
        float sum;
        if (q4) {
          for (int j = 0; j < 4; ++j)
            for (int k = 0; k < 4; ++k) {
              const uint8_t byte = blk[chunk_offset(i, j) + k];
              s += (byte & 0xF) * xq[4 * j + k] + (byte >> 4) * xq[16 + 4 * j + k];
            }
          sum = static_cast<float>(s) - a.x8[static_cast<size_t>(t0 + t) * a.nb + b];
        } else {
          for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 4; ++k)
              s += static_cast<int8_t>(blk[chunk_offset(i, j) + k]) * xq[4 * j + k];
          sum = static_cast<float>(s);
        }
        acc = std::fma(scale, sum, acc);
      }
      out[t][i] = acc;
    }
}
}  // namespace scalar

#if KVLM_X86
namespace {

// Q4_0 decode does enough work per byte that the hardware prefetcher falls behind: asking for
// the bytes 2 KiB ahead took TinyLlama Q4_0 decode from ~24 to ~19.5 ms per token here. Q8_0
// decode showed no difference beyond the noise, so it streams on the hardware prefetcher alone.
constexpr size_t kPrefetch = 2048;
inline void prefetch_block(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

template <int NT>
__attribute__((target("avx2,fma,f16c"))) void q4_avx2(const uint8_t* group, const QuantizedActs& a, int t0,
                                                      float out[][kGroupRows]) {
  const size_t bb = q_block_bytes(DType::Q4_0);
  const __m256i low = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  const int8_t* xq[NT];
  const float *xd[NT], *x8[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    xq[t] = a.q.data() + static_cast<size_t>(t0 + t) * a.in;
    xd[t] = a.d.data() + static_cast<size_t>(t0 + t) * a.nb;
    x8[t] = a.x8.data() + static_cast<size_t>(t0 + t) * a.nb;
  }
  for (int b = 0; b < a.nb; ++b) {
    const uint8_t* blk = group + b * bb;
    if (NT == 1) prefetch_block(blk + kPrefetch, bb);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    __m256i s16[NT];
    for (int t = 0; t < NT; ++t) s16[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kScaleBytes + 32 * j));
      const __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      for (int t = 0; t < NT; ++t) {
        // 0..15 x -127..127, pairs <= 3810: eight of them still fit an int16 lane.
        const __m256i xl = _mm256_set1_epi32(load_i32(xq[t] + b * 32 + 4 * j));
        const __m256i xh = _mm256_set1_epi32(load_i32(xq[t] + b * 32 + 16 + 4 * j));
        s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(lo, xl));
        s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(hi, xh));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m256 sum = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones)), _mm256_set1_ps(x8[t][b]));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xd[t][b])), sum, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

template <int NT>
__attribute__((target("avx2,fma,f16c"))) void q8_avx2(const uint8_t* group, const QuantizedActs& a, int t0,
                                                      float out[][kGroupRows]) {
  const size_t bb = q_block_bytes(DType::Q8_0);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  const int8_t* xq[NT];
  const float* xd[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    xq[t] = a.q.data() + static_cast<size_t>(t0 + t) * a.in;
    xd[t] = a.d.data() + static_cast<size_t>(t0 + t) * a.nb;
  }
  for (int b = 0; b < a.nb; ++b) {
    const uint8_t* blk = group + b * bb;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    __m256i s32[NT];
    for (int t = 0; t < NT; ++t) s32[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kScaleBytes + 32 * j));
      const __m256i aw = _mm256_sign_epi8(w, w);  // |w| as the unsigned operand, w's sign moved onto x
      for (int t = 0; t < NT; ++t) {
        const __m256i x = _mm256_set1_epi32(load_i32(xq[t] + b * 32 + 4 * j));
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
        s32[t] = _mm256_add_epi32(s32[t], _mm256_madd_epi16(p, ones));
      }
    }
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xd[t][b])), _mm256_cvtepi32_ps(s32[t]), acc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

template <int NT>
void dispatch_nt(DType f, const uint8_t* group, const QuantizedActs& a, int t0, float out[][kGroupRows]) {
  if (f == DType::Q4_0)
    q4_avx2<NT>(group, a, t0, out);
  else
    q8_avx2<NT>(group, a, t0, out);
}

}  // namespace
#endif  // KVLM_X86

void qgemm_group(DType f, const uint8_t* group, const QuantizedActs& a, int t0, int nt, float out[][kGroupRows]) {
  KVLM_CHECK(nt >= 1 && nt <= 4, "qgemm_group takes 1 to 4 tokens, not ", nt);
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) {
    switch (nt) {
      case 1: return dispatch_nt<1>(f, group, a, t0, out);
      case 2: return dispatch_nt<2>(f, group, a, t0, out);
      case 3: return dispatch_nt<3>(f, group, a, t0, out);
      default: return dispatch_nt<4>(f, group, a, t0, out);
    }
  }
#endif
  scalar::qgemm_group(f, group, a, t0, nt, out);
}

}  // namespace kvlm
