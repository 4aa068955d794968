#include "kernels/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/dot.h"
#include "kernels/quantize.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvlm {

bool kv_dtype_fits(DType t, int kv_dim) {
  const DTypeTraits& r = dtype_traits(t);
  return (r.roles & kInKvPages) && (r.block <= 1 || kv_dim % r.block == 0);
}

size_t KvRowCodec::other_data_bytes() const { return kv_dim * dtype_traits(dtype).block_bytes; }

uint16_t f32_to_f16_saturated(float x) {
  constexpr float kMax = 65504.0f;
  if (std::isfinite(x)) x = std::clamp(x, -kMax, kMax);
  return f32_to_f16(x);
}

#if KVLM_X86
namespace {
// f32_to_f16_saturated eight at a time (vcvtps2ph rounds to nearest even and keeps subnormals, as
// the scalar does): every prefill row of an f16 cache is encoded, and the scalar conversion's
// branches took ~2 ns a value (about 5% of GPT-2's prefill of 512 tokens, by that rate). Returns
// the values done.
__attribute__((target("avx2,fma,f16c"))) int encode_f16_avx2(const float* x, uint8_t* h, int n) {
  const __m256 max = _mm256_set1_ps(65504.0f), inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), a = _mm256_and_ps(v, abs_mask);
    // Finite and beyond the range (ordered compares: NaN is neither): the sign with 65504.
    const __m256 over = _mm256_and_ps(_mm256_cmp_ps(a, max, _CMP_GT_OQ), _mm256_cmp_ps(a, inf, _CMP_LT_OQ));
    const __m256 sat = _mm256_or_ps(_mm256_andnot_ps(abs_mask, v), max);
    const __m128i r = _mm256_cvtps_ph(_mm256_blendv_ps(v, sat, over), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 2 * i), r);
  }
  return i;
}
// f32_to_bf16 sixteen at a time in integers (vcvtneps2bf16 would flush subnormals): round to
// nearest even on the top half, NaN kept NaN with its quiet bit; bf16 prefill rows spent as long
// in the scalar loop as f16's did. Returns the values done.
__attribute__((target("avx2,fma,f16c"))) inline __m256i bf16_bits_avx2(const float* x) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256i b = _mm256_castps_si256(v), top = _mm256_srli_epi32(b, 16);
  const __m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
__attribute__((target("avx2,fma,f16c"))) int encode_bf16_avx2(const float* x, uint8_t* h, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus works within 128-bit halves: [a0-3 b0-3 a4-7 b4-7], put back in order by 64-bit lanes.
    const __m256i packed = _mm256_packus_epi32(bf16_bits_avx2(x + i), bf16_bits_avx2(x + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + 2 * i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  return i;
}
}  // namespace
#endif

namespace {
// An f16 or bf16 row: the vector conversion where the CPU has it, the scalar one for the rest.
// Rows are bytes at any alignment (a page's rows follow one another, int8 and int4 ones with
// odd sizes), so the values are stored by memcpy.
void encode_half(bool f16, const float* x, uint8_t* h, int n) {
  int i = 0;
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) i = f16 ? encode_f16_avx2(x, h, n) : encode_bf16_avx2(x, h, n);
#endif
  for (; i < n; ++i) {
    const uint16_t v = f16 ? f32_to_f16_saturated(x[i]) : f32_to_bf16(x[i]);
    std::memcpy(h + 2 * i, &v, 2);
  }
}
}  // namespace

void KvRowCodec::encode(const float* x, uint8_t* data, float* params) const {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
      encode_half(dtype == DType::F16, x, data, kv_dim);
      return;
    case DType::F32:
      dtype_traits(dtype).from_float(x, data, kv_dim);
      return;
    case DType::Int8:
      quantize_symmetric_i8(x, kv_dim, head_dim, params, reinterpret_cast<int8_t*>(data));  // a scale per head
      return;
    case DType::Int4:
      for (int g = 0; g < kv_dim / 32; ++g) {
        const float* xg = x + g * 32;
        float lo = *std::min_element(xg, xg + 32), hi = *std::max_element(xg, xg + 32);
        float s = (hi - lo) / 15.0f, inv = s ? 1.0f / s : 0.0f;
        params[2 * g] = s;
        params[2 * g + 1] = lo;
        for (int i = 0; i < 16; ++i) {
          int a = std::clamp(static_cast<int>(std::nearbyint((xg[2 * i] - lo) * inv)), 0, 15);
          int b = std::clamp(static_cast<int>(std::nearbyint((xg[2 * i + 1] - lo) * inv)), 0, 15);
          data[g * 16 + i] = static_cast<uint8_t>(a | (b << 4));
        }
      }
      return;
    default:
      KVLM_CHECK(false, dtype_name(dtype), " is not a KV codec");
  }
}

#if KVLM_X86
namespace {
// Attention decodes every cached row it reads, so the decoders are vectorized; they compute the
// same products as the scalar code below (one multiply, or one fused multiply-add for int4).
__attribute__((target("avx2,fma,f16c"))) inline bool decode_head_avx2(DType t, const uint8_t* data, const float* params,
                                                                 int h, int head_dim, float* out) {
  const int base = h * head_dim;
  if (head_dim % 8 != 0) return false;
  if (t == DType::F16) {
    for (int i = 0; i < head_dim; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 2 * (base + i)))));
    return true;
  }
  if (t == DType::BF16) {
    for (int i = 0; i < head_dim; i += 8) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 2 * (base + i))));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    return true;
  }
  if (t == DType::Int8) {
    const __m256 s = _mm256_set1_ps(params[h]);
    for (int i = 0; i < head_dim; i += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + base + i));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
    return true;
  }
  if (t == DType::Int4 && head_dim % 32 == 0) {
    for (int g = base / 32, gi = 0; gi < head_dim / 32; ++gi, ++g) {
      const __m256 s = _mm256_set1_ps(params[2 * g]), z = _mm256_set1_ps(params[2 * g + 1]);
      for (int i = 0; i < 16; i += 4) {  // 4 bytes = 8 values, low nibble first
        uint32_t w;
        std::memcpy(&w, data + g * 16 + i, 4);
        const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(w)));
        // lanes 0..3 hold bytes; values interleave lo, hi per byte
        const __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi32(0xF)), hi = _mm256_srli_epi32(bytes, 4);
        const __m256i l = _mm256_permutevar8x32_epi32(lo, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        const __m256i hh = _mm256_permutevar8x32_epi32(hi, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        const __m256i q = _mm256_blend_epi32(l, hh, 0xAA);
        _mm256_storeu_ps(out + gi * 32 + 2 * i, _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(q), z));
      }
    }
    return true;
  }
  return false;
}
// The run's rows in one call: the type is switched on once, and the row loop inlines the decoder.
__attribute__((target("avx2,fma,f16c"))) bool decode_rows_avx2(const KvRowCodec& c, const uint8_t* data, const float* params,
                                                          int h, int n, float* out) {
  if (c.head_dim % 8 != 0 || (c.dtype == DType::Int4 && c.head_dim % 32 != 0)) return false;
  const size_t db = c.data_bytes(), pn = c.n_params();
  const size_t head_bytes = c.head_data_bytes(), head_at = c.head_data_offset(h);
  for (int i = 0; i < n; ++i) {
    // Rows are a whole KV row apart: ask for the rows 8 ahead (see attention.cpp's prefetch).
    for (size_t o = 0; o < head_bytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(data + (i + 8) * db + head_at + o), _MM_HINT_T0);
    decode_head_avx2(c.dtype, data + i * db, params + i * pn, h, c.head_dim, out + static_cast<size_t>(i) * c.head_dim);
  }
  return true;
}
}  // namespace
#endif  // KVLM_X86

void KvRowCodec::decode_rows(const uint8_t* data, const float* params, int h, int n, float* out) const {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2) && decode_rows_avx2(*this, data, params, h, n, out)) return;
#endif
  for (int i = 0; i < n; ++i)
    decode_head_scalar(data + i * data_bytes(), params + i * n_params(), h, out + static_cast<size_t>(i) * head_dim);
}

void KvRowCodec::decode_head(const uint8_t* data, const float* params, int h, float* out) const {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2) && decode_head_avx2(dtype, data, params, h, head_dim, out)) return;
#endif
  decode_head_scalar(data, params, h, out);
}

void KvRowCodec::decode_head_scalar(const uint8_t* data, const float* params, int h, float* out) const {
  const int base = h * head_dim;
  switch (dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: {
      const DTypeTraits& r = dtype_traits(dtype);
      r.to_float(data + base * r.block_bytes, out, head_dim);
      return;
    }
    case DType::Int8: {
      float s = params[h];
      const int8_t* q = reinterpret_cast<const int8_t*>(data) + base;
      for (int i = 0; i < head_dim; ++i) out[i] = s * q[i];
      return;
    }
    case DType::Int4:
      if (head_dim % 32 == 0) {  // whole groups: unpack nibble pairs without per-element arithmetic
        for (int g0 = base / 32, gi = 0; gi < head_dim / 32; ++gi) {
          const float s = params[2 * (g0 + gi)], z = params[2 * (g0 + gi) + 1];
          const uint8_t* q = data + (g0 + gi) * 16;
          float* o = out + gi * 32;
          for (int i = 0; i < 16; ++i) {
            o[2 * i] = std::fma(s, static_cast<float>(q[i] & 0xF), z);
            o[2 * i + 1] = std::fma(s, static_cast<float>(q[i] >> 4), z);
          }
        }
        return;
      }
      for (int i = 0; i < head_dim; ++i) {
        int e = base + i, g = e / 32;
        uint8_t byte = data[e / 2];
        int q = (e & 1) ? byte >> 4 : byte & 0xF;
        out[i] = std::fma(params[2 * g], static_cast<float>(q), params[2 * g + 1]);
      }
      return;
    default:
      KVLM_CHECK(false, dtype_name(dtype), " is not a KV codec");
  }
}

}  // namespace kvlm
