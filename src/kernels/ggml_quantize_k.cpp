// The K types Q2_K..Q6_K, as quantize_row_q*_K_ref: per 16 or 32 values a scale (and a min) from
// a search, those scales stored as 4..8-bit multiples of f16 super-block scales, then every value
// re-rounded against the stored scales. Block layouts as ggml-common.h's block_q*_K.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/ggml_quantize.h"
#include "kernels/ggml_quantize_search.h"

namespace kvlm {

namespace {

using ggml_search::kGroupMaxEps;
using ggml_search::levels_with_min;
using ggml_search::nearest_int;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Four 2-bit values per byte: byte l of each 32 holds values l, l + 32, l + 64 and l + 96 of 128.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q2_K: [16 scales: 4-bit scale | 4-bit min << 4][64 bytes of 2-bit values][f16 d][f16 dmin].
void q2_k(const float* x, uint8_t* y) {
  uint8_t L[256], Laux[16], *scales_q = y, *qs = y + 16;
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.f;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = levels_with_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) scales_q[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    put_f16(y + 80, max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j) scales_q[j] = 0;
    put_f16(y + 80, 0.f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) scales_q[j] = static_cast<uint8_t>(scales_q[j] | (nearest_int(iscale * mins[j]) << 4));
    put_f16(y + 82, max_min / q4scale);
  } else {
    put_f16(y + 82, 0.f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = f16_at(y + 80) * (scales_q[j] & 0xF);
    if (!d) continue;
    const float dm = f16_at(y + 82) * (scales_q[j] >> 4);
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * j + i] + dm) / d))));
  }
  pack_2bit(L, qs);
}

// Q3_K: [32 bytes of high bits][64 bytes of 2-bit values][12 bytes of 6-bit scales][f16 d].
void q3_k(const float* x, uint8_t* y) {
  uint8_t *hmask = y, *qs = y + 32, *sc = y + 96;
  int8_t L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = ggml_search::q3_levels(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(sc, 0, 12);
  if (max_scale) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      l = static_cast<int8_t>(std::max(-32, std::min(31, static_cast<int>(l))) + 32);
      if (j < 8) sc[j] = l & 0xF;
      else sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | ((l & 0xF) << 4));
      l = static_cast<int8_t>(l >> 4);
      sc[j % 4 + 8] = static_cast<uint8_t>(sc[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    put_f16(y + 108, 1 / iscale);
  } else {
    put_f16(y + 108, 0.f);
  }
  for (int j = 0; j < 16; ++j) {
    int8_t s = static_cast<int8_t>(j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4);
    s = static_cast<int8_t>((s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    const float d = f16_at(y + 108) * s;
    if (!d) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * j + i] / d))) + 4);
  }
  // the high bit of values 0..31 goes to bit 0 of hmask[0..31], of 32..63 to bit 1, and so on
  std::memset(hmask, 0, 32);
  int m = 0;
  uint8_t hm = 1;
  uint8_t low[256];
  for (int j = 0; j < 256; ++j) {
    int l = L[j];
    if (l > 3) {
      hmask[m] |= hm;
      l -= 4;
    }
    low[j] = static_cast<uint8_t>(l);
    if (++m == 32) {
      m = 0;
      hm = static_cast<uint8_t>(hm << 1);
    }
  }
  pack_2bit(low, qs);
}

// Q4_K and Q5_K's first step: per 32 values a scale and min (weights: the rms plus |x|), then
// both as 6-bit multiples of f16 d and dmin, packed as get_scale_min_k4 reads them; every value
// re-rounded to 0..nmax against the stored pair. L gets the levels.
void scales_mins_k4(const float* x, int nmax, float rmin, int nstep, uint8_t* y_d, uint8_t* y_scales, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = levels_with_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    // ggml keeps these in uint8_t before clamping: a negative rounds through the wrap to 63
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      y_scales[j] = ls;
      y_scales[j + 4] = lm;
    } else {
      y_scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y_scales[j - 4] = static_cast<uint8_t>(y_scales[j - 4] | ((ls >> 4) << 6));
      y_scales[j] = static_cast<uint8_t>(y_scales[j] | ((lm >> 4) << 6));
    }
  }
  put_f16(y_d, max_scale / 63.f);
  put_f16(y_d + 2, max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    if (j < 4) {
      sc = y_scales[j] & 63;
      m = y_scales[j + 4] & 63;
    } else {
      sc = static_cast<uint8_t>((y_scales[j + 4] & 0xF) | ((y_scales[j - 4] >> 6) << 4));
      m = static_cast<uint8_t>((y_scales[j + 4] >> 4) | ((y_scales[j] >> 6) << 4));
    }
    const float d = f16_at(y_d) * sc;
    if (!d) continue;
    const float dm = f16_at(y_d + 2) * m;
    for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + i] + dm) / d))));
  }
}

// Q4_K: [f16 d][f16 dmin][12 bytes of scales][128 bytes: values l and l + 32 of each 64 in a byte].
void q4_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  scales_mins_k4(x, 15, -1.f, 20, y, y + 4, L);
  uint8_t* q = y + 16;
  for (int j = 0; j < 256; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

// Q5_K: Q4_K's layout with 32 bytes of fifth bits before the nibbles (bits 2k and 2k + 1 of byte
// l: values l and l + 32 of the k-th 64).
void q5_k(const float* x, uint8_t* y) {
  uint8_t L[256];
  scales_mins_k4(x, 31, -0.5f, 15, y, y + 4, L);
  uint8_t *qh = y + 16, *ql = y + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<uint8_t>(m1 << 2);
    m2 = static_cast<uint8_t>(m2 << 2);
  }
}

// Q6_K: [128 bytes of low nibbles][64 bytes of high 2 bits][16 int8 scales][f16 d].
void q6_k(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = ggml_search::symmetric_levels(16, 32, x + 16 * ib, L + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, 210);
    return;
  }
  int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
  const float iscale = -128.f / max_scale;
  put_f16(y + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < 16; ++j) {
    const float d = f16_at(y + 208) * sc[j];
    if (!d) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + i] / d))) + 32);
  }
  uint8_t *ql = y, *qh = y + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
}

template <void (*block)(const float*, uint8_t*), size_t bytes>
void each_super_block(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / 256; ++i) block(src + i * 256, dst + i * bytes);
}

}  // namespace

void quantize_k_blocks(DType t, const float* src, uint8_t* dst, size_t n) {
  switch (t) {
    case DType::Q2_K: return each_super_block<q2_k, 84>(src, dst, n);
    case DType::Q3_K: return each_super_block<q3_k, 110>(src, dst, n);
    case DType::Q4_K: return each_super_block<q4_k, 144>(src, dst, n);
    case DType::Q5_K: return each_super_block<q5_k, 176>(src, dst, n);
    case DType::Q6_K: return each_super_block<q6_k, 210>(src, dst, n);
    default: KVLM_CHECK(false, "not a K type: ", dtype_name(t));
  }
}

}  // namespace kvlm
