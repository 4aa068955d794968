// The 32-value types and the IQ4 types; the K types are in ggml_quantize_k.cpp. Block layouts as
// ggml-common.h's block_* structs, f16 scales little-endian.
#include "kernels/ggml_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/ggml_blocks.h"
#include "kernels/ggml_quantize_search.h"

namespace kvlm {

void quantize_k_blocks(DType t, const float* src, uint8_t* dst, size_t n);  // ggml_quantize_k.cpp

namespace {

using ggml_search::best_index_int8;
using ggml_search::kGroupMaxEps;
using ggml_search::nearest_int;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// The lowest and highest of a block's 32 values.
void min_max(const float* x, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// The value of largest magnitude (the first of ties).
float signed_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// Q8_0: [f16 d][32 int8]; q = x / d rounded half away from zero (roundf: the reference rounding,
// where kernels/quantize.h's activation quantizer rounds half to even).
void q8_0(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / ((1 << 7) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  put_f16(y, d);
  for (int j = 0; j < 32; ++j) y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

// Q4_0: [f16 d][nibbles]; the value of largest magnitude maps to -8.
void q4_0(const float* x, uint8_t* y) {
  const float d = signed_max(x, 32) / -8;
  const float id = d ? 1.0f / d : 0.0f;
  put_f16(y, d);
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
    const uint8_t hi = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f))));
    y[2 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

// Q4_1: [f16 d][f16 min][nibbles]; q = (x - min) / d rounded half up.
void q4_1(const float* x, uint8_t* y) {
  float min, max;
  min_max(x, min, max);
  const float d = (max - min) / ((1 << 4) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  put_f16(y, d);
  put_f16(y + 2, min);
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f))));
    const uint8_t hi = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f))));
    y[4 + j] = static_cast<uint8_t>(lo | hi << 4);
  }
}

// Q5_0 / Q5_1's fifth bits: bit j of the u32 is value j's.
void put_fifth_bits(const uint8_t* q5, uint8_t* qh_at, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q5[j] & 0x0F) | ((q5[j + 16] & 0x0F) << 4));
    qh |= ((q5[j] & 0x10u) >> 4) << j;
    qh |= ((q5[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_at, &qh, 4);
}

// Q5_0: [f16 d][u32 fifth bits][nibbles]; the value of largest magnitude maps to -16.
void q5_0(const float* x, uint8_t* y) {
  const float d = signed_max(x, 32) / -16;
  const float id = d ? 1.0f / d : 0.0f;
  put_f16(y, d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
  put_fifth_bits(q, y + 2, y + 6);
}

// Q5_1: [f16 d][f16 min][u32 fifth bits][nibbles].
void q5_1(const float* x, uint8_t* y) {
  float min, max;
  min_max(x, min, max);
  const float d = (max - min) / ((1 << 5) - 1);
  const float id = d ? 1.0f / d : 0.0f;
  put_f16(y, d);
  put_f16(y + 2, min);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
  put_fifth_bits(q, y + 4, y + 8);
}

// MXFP4: [E8M0 exponent][nibbles of E2M1 levels]; each value takes its nearest level.
void mxfp4(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  // ggml converts the float straight to uint8 (through an int on every target it builds for)
  const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
  const float d = e8m0_half(e);
  y[0] = e;
  auto nearest = [d](float v) {
    int best = 0;
    float best_err = std::fabs(kFp4Levels[0] * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(kFp4Levels[i] * d - v);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  };
  for (int j = 0; j < 16; ++j) y[1 + j] = static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + 16]) << 4);
}

// IQ4_NL and IQ4_XS (quantize_row_iq4_nl_impl with 7 steps, no importance matrix): per 32 values
// a scale from 15 candidates by weighted least squares (weights x^2) over the non-linear levels;
// IQ4_XS then stores the 8 scales as 6-bit multiples of one f16 per 256 and re-picks each level.
// Writes the f16 d at dh, the nibbles at q4, and IQ4_XS's scales at scales_h / scales_l.
void iq4_levels(int super_block, const float* x, uint8_t* dh, uint8_t* q4, uint8_t* scales_h, uint8_t* scales_l) {
  constexpr int kTries = 7;
  const int8_t* values = kIq4Levels;
  uint8_t L[256];
  float scales[8], weight[32];
  std::memset(q4, 0, super_block / 2);
  put_f16(dh, 0.f);
  float max_scale = 0, amax_scale = 0;
  const int blocks = super_block / 32;
  for (int ib = 0; ib < blocks; ++ib) {
    const float* xb = x + ib * 32;
    uint8_t* Lb = L + ib * 32;
    for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;  // its levels are picked below, from a scale of 0
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = best_index_int8(16, values, id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = values[best_index_int8(16, values, id * xb[j])];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (blocks > 1) {
    uint16_t sh = 0;
    const float d = -max_scale / 32;
    put_f16(dh, d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < blocks; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * l;
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[ib * 32 + j] = static_cast<uint8_t>(best_index_int8(16, values, idl * x[ib * 32 + j]));
      l += 32;
      const uint8_t l_l = l & 0xf, l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) scales_l[ib / 2] = l_l;
      else scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      sh |= static_cast<uint16_t>(l_h << 2 * (ib % 8));
    }
    std::memcpy(scales_h, &sh, 2);
  } else {
    put_f16(dh, scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index_int8(16, values, id * x[j]));
  }
  for (int i = 0; i < super_block / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void iq4_nl(const float* x, uint8_t* y) { iq4_levels(32, x, y, y + 2, nullptr, nullptr); }
// IQ4_XS: [f16 d][u16 scales_h][4 bytes scales_l][128 bytes of nibbles].
void iq4_xs(const float* x, uint8_t* y) { iq4_levels(256, x, y, y + 8, y + 2, y + 4); }

template <void (*block)(const float*, uint8_t*), size_t values, size_t bytes>
void each_block(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / values; ++i) block(src + i * values, dst + i * bytes);
}

}  // namespace

bool can_quantize_blocks(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::MXFP4: case DType::IQ4_NL: case DType::IQ4_XS:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_blocks(DType t, const float* src, uint8_t* dst, size_t n) {
  if (!can_quantize_blocks(t)) fail("cannot quantize to ", dtype_name(t));
  if (n % dtype_block(t) != 0) fail(dtype_name(t), ": ", n, " values are not whole blocks of ", dtype_block(t));
  switch (t) {
    case DType::Q8_0: each_block<q8_0, 32, 34>(src, dst, n); return;
    case DType::Q4_0: each_block<q4_0, 32, 18>(src, dst, n); return;
    case DType::Q4_1: each_block<q4_1, 32, 20>(src, dst, n); return;
    case DType::Q5_0: each_block<q5_0, 32, 22>(src, dst, n); return;
    case DType::Q5_1: each_block<q5_1, 32, 24>(src, dst, n); return;
    case DType::MXFP4: each_block<mxfp4, 32, 17>(src, dst, n); return;
    case DType::IQ4_NL: each_block<iq4_nl, 32, 18>(src, dst, n); return;
    case DType::IQ4_XS: each_block<iq4_xs, 256, 136>(src, dst, n); return;
    default: quantize_k_blocks(t, src, dst, n); return;
  }
}

}  // namespace kvlm
