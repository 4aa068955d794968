// The ggml block types that run as the file stores them, row by row: Q4_1, Q5_0, Q5_1, the
// K-quants Q2_K..Q6_K, IQ4_NL, IQ4_XS and MXFP4 (Q8_0 and Q4_0 are repacked: kernels/qgemm.h).
//
// Every such block decodes into one common form, which the integer dot (kernels/row_dot.h) and
// the f32 decoder share, so a new type is one unpacker:
//   value v of a block = d[v/32] * scale[v/16] * q[v]  -  m[v/32] * min[v/16]
// with q a signed int8 (|q| <= 127), scale and min small integers, d and m floats. The K-quants'
// 6-bit sub-scales become `scale`/`min`, their f16 super-block scales `d`/`m`; Q4_1's additive
// min is m = -min (min = 1); types without mins leave m and min zero. The f32 values are computed
// in that order ((d * scale) * q - m * min), which is ggml's dequantize_row_* rounding for each.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"

namespace kvlm {

// Where an unpacker writes one block (32 or 256 values) in the common form: q per value, scale
// and min per 16 values, d and m per 32 (q null: the scales alone, for the SIMD unpackers). A
// row's blocks go one after the other (kernels/row_dot.h).
struct BlockOut {
  int8_t* q;
  int16_t *scale, *min;
  float *d, *m;
};
// Storage for one block of up to 256 values.
struct UnpackedBlock {
  int8_t q[256];
  int16_t scale[16], min[16];
  float d[8], m[8];
};

struct BlockCodec {
  DType type;
  int values;      // per block: 32 or 256
  size_t bytes;    // per block, as stored
  bool has_min;    // whether m/min can be non-zero
  bool unsigned_q; // whether every q is >= 0 (a dot needs no sign handling)
  void (*unpack)(const uint8_t* block, const BlockOut& out);
};

// IQ4_NL / IQ4_XS's non-linear levels, and MXFP4's (E2M1 values times 2: its scale is halved).
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr int8_t kFp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// An E8M0 exponent (MXFP4's scale) as 2^(e - 128): half the scale it encodes, as ggml's
// GGML_E8M0_TO_FP32_HALF (MXFP4's levels are doubled).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A Q3_K block's sixteen 6-bit sub-scales (12 packed bytes at offset 96), less their offset of 32.
void q3k_scales(const uint8_t* block, int16_t scale[16]);

// The codec of a row-quant type; null for every other type.
const BlockCodec* block_codec(DType t);
// Widens n values (whole blocks) of a row-quant type to f32, ggml's values bit for bit.
void blocks_to_float(DType t, const uint8_t* src, float* dst, size_t n);

}  // namespace kvlm
