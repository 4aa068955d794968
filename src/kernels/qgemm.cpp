#include "kernels/qgemm.h"

#if defined(__x86_64__)
#include "kernels/avx512_intrinsics.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/linear.h"
#include "kernels/prefetch.h"

namespace kvlm {

namespace {
constexpr size_t kScaleBytes = kPackedScaleBytes;

// The packed layout in one place: row i's f16 scale, and where row i's chunk j (4 bytes) sits.
float row_scale(const uint8_t* blk, int i) {
  uint16_t h;
  std::memcpy(&h, blk + i * 2, 2);
  return f16_to_f32(h);
}
size_t chunk_offset(int i, int j) { return kScaleBytes + (static_cast<size_t>(j) * kGroupRows + i) * 4; }

[[maybe_unused]] int32_t load_i32(const void* p) {  // used by the x86 bodies only
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

namespace scalar {
void pack_gguf_group(DType f, const uint8_t* rows, int n_rows, int in, uint8_t* group) {
  const int nb = in / 32;
  const size_t bb = q_block_bytes(f), qb = quant_bytes(f), gguf_bytes = 2 + qb;
  if (n_rows < kGroupRows) std::memset(group, 0, static_cast<size_t>(nb) * bb);
  for (int i = 0; i < n_rows; ++i)
    for (int b = 0; b < nb; ++b) {
      const uint8_t* src = rows + (static_cast<size_t>(i) * nb + b) * gguf_bytes;
      uint16_t scale;
      std::memcpy(&scale, src, 2);
      place_block(group + b * bb, i, scale, src + 2, qb);
    }
}
}  // namespace scalar

#if KVLM_X86
namespace {
// Eight stored Q8_0 rows into one packed group: per block, the 8 rows' 32 bytes are an 8 x 8
// matrix of 4-byte chunks, and the packed block is its transpose (chunk j of rows 0..7 together).
// Three shuffle rounds per block instead of 64 small copies; the next group's bytes are asked for
// as each block is read (eight rows are eight short streams the hardware prefetcher misses).
__attribute__((target("avx2"))) void pack_q8_group_avx2(const uint8_t* rows, size_t row_bytes, int nb, uint8_t* group) {
  const size_t bb = q_block_bytes(DType::Q8_0);
  for (int b = 0; b < nb; ++b) {
    const uint8_t* src = rows + static_cast<size_t>(b) * 34;
    uint8_t* dst = group + b * bb;
    __m256i r[8];
    for (int i = 0; i < 8; ++i) {
      const uint8_t* p = src + i * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(p + kGroupRows * row_bytes), _MM_HINT_T0);
      std::memcpy(dst + 2 * i, p, 2);
      r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    }
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {  // dwords of rows i, i+1 paired
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // then quads of rows
      u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // u[k] (k < 4) holds chunks k (low lane) and k + 4 (high lane) of rows 0..3; u[k + 4] of rows 4..7.
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kScaleBytes + 32 * k),
                          _mm256_permute2x128_si256(u[k], u[k + 4], 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kScaleBytes + 32 * (k + 4)),
                          _mm256_permute2x128_si256(u[k], u[k + 4], 0x31));
    }
  }
}
}  // namespace
#endif

void pack_gguf_group(DType f, const uint8_t* rows, int n_rows, int in, uint8_t* group) {
#if KVLM_X86
  if (f == DType::Q8_0 && n_rows == kGroupRows && isa_at_least(Isa::Avx2))
    return pack_q8_group_avx2(rows, static_cast<size_t>(in / 32) * 34, in / 32, group);
#endif
  scalar::pack_gguf_group(f, rows, n_rows, in, group);
}

Buffer<uint8_t> pack_gguf_blocks(DType f, const uint8_t* rows, int out, int in) {
  const int groups = (out + kGroupRows - 1) / kGroupRows;
  const size_t gbytes = q_group_bytes(f, in / 32), row_bytes = static_cast<size_t>(in / 32) * (2 + quant_bytes(f));
  Buffer<uint8_t> packed(static_cast<size_t>(groups) * gbytes);
  // Loading is mostly this copy: every thread takes its own groups (llama.cpp repacks in parallel too).
  ThreadPool::global().parallel_for(groups, [&](size_t g0, size_t g1) {
    for (size_t g = g0; g < g1; ++g) {
      const int r0 = static_cast<int>(g) * kGroupRows;
      pack_gguf_group(f, rows + r0 * row_bytes, std::min(kGroupRows, out - r0), in, packed.data() + g * gbytes);
    }
  });
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

void QuantizedActs::quantize(const float* x, int n_tokens, int in_features, ThreadPool* pool, int block_values,
                             int pad_tokens) {
  KVLM_CHECK((block_values == 32 || block_values == 256) && in_features % block_values == 0, "activation blocks of ",
             block_values, " over ", in_features, " values");
  KVLM_CHECK(pad_tokens >= 1, "token padding of ", pad_tokens);
  n = n_tokens;
  in = in_features;
  block = block_values;
  nb = in / block;
  n_padded = (n + pad_tokens - 1) / pad_tokens * pad_tokens;
  const size_t np = static_cast<size_t>(n_padded);
  d.resize(np * nb);
  q.resize(np * in);
  x8.resize(block == 32 ? np * nb : 0);
  s16.resize(np * (in / 16));
  if (n_padded > n) {
    const size_t n0 = static_cast<size_t>(n);
    std::fill(d.data() + n0 * nb, d.data() + np * nb, 0.0f);
    std::fill(q.data() + n0 * in, q.data() + np * in, int8_t{0});
    if (block == 32) std::fill(x8.data() + n0 * nb, x8.data() + np * nb, 0.0f);
    std::fill(s16.data() + n0 * (in / 16), s16.data() + np * (in / 16), int16_t{0});
  }
  auto rows = [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      int8_t* qt = q.data() + t * in;
      if (block == 32)
        quantize_row_q8_0(x + t * in, in, d.data() + t * nb, qt);
      else
        quantize_symmetric_i8(x + t * in, in, block, d.data() + t * nb, qt);
      for (int k = 0; k < in / 16; ++k) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += qt[16 * k + i];
        s16[t * (in / 16) + k] = static_cast<int16_t>(s);
      }
      if (block == 32)
        for (int b = 0; b < nb; ++b)
          x8[t * nb + b] = 8.0f * static_cast<float>(s16[t * (in / 16) + 2 * b] + s16[t * (in / 16) + 2 * b + 1]);
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

// Decode reads each weight once, with enough work per byte that the hardware prefetcher falls
// behind, so the first token tile over a group asks for the bytes ahead. Q4_0, 2 KiB ahead:
// TinyLlama Q4_0 decode went from ~24 to ~19.5 ms per token. Q8_0, 1 KiB ahead (a core's
// bandwidth times the memory's latency; 512 B to 1.5 KiB measured alike): TinyLlama's 154
// matrices went from 15.5 to 17.7 GB/s at one token, and 10-17% faster at 2 to 8 tokens (medians
// of 12 alternated passes on an AVX2 EPYC whose two cores read 18-20 GB/s).
constexpr size_t kPrefetchQ4 = 2048, kPrefetchQ8 = 1024;
}  // namespace

using GroupKernel = void (*)(DType, const uint8_t*, const QuantizedActs&, int, float[][kGroupRows]);

// One body, two targets.
KVLM_TARGET_BEGIN("avx2,fma,f16c")
namespace avx2 {
#define KVLM_QGEMM_VNNI 0
#include "kernels/qgemm_simd.inc"
#undef KVLM_QGEMM_VNNI
}  // namespace avx2
KVLM_TARGET_END
KVLM_TARGET_BEGIN(KVLM_AVX512_TARGET)
namespace avx512 {
#define KVLM_QGEMM_VNNI 1
#include "kernels/qgemm_simd.inc"
#undef KVLM_QGEMM_VNNI
}  // namespace avx512
KVLM_TARGET_END
#endif  // KVLM_X86

void qgemm_group(DType f, const uint8_t* group, const QuantizedActs& a, int t0, int nt, float out[][kGroupRows]) {
  KVLM_CHECK(nt >= 1 && nt <= 4, "qgemm_group takes 1 to 4 tokens, not ", nt);
#if KVLM_X86
  if (isa_at_least(Isa::Avx512)) return avx512::kByTokens[nt - 1](f, group, a, t0, out);
  if (isa_at_least(Isa::Avx2)) return avx2::kByTokens[nt - 1](f, group, a, t0, out);
#endif
  scalar::qgemm_group(f, group, a, t0, nt, out);
}

}  // namespace kvlm
