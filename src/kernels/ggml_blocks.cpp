// The unpackers follow ggml-quants.c's dequantize_row_* for each layout (ggml-common.h's
// block_* structs); tests/gguf_test.cpp checks the f32 values against the PyPI gguf package.
#include "kernels/ggml_blocks.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kvlm {

void q3k_scales(const uint8_t* block, int16_t scale[16]) {
  uint32_t aux[4];
  std::memcpy(aux, block + 96, 12);
  const uint32_t tmp = aux[2], k2 = 0x0f0f0f0f, k1 = 0x03030303;
  aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
  aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
  aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
  aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
  uint8_t sc[16];
  std::memcpy(sc, aux, 16);
  for (int s = 0; s < 16; ++s) scale[s] = static_cast<int16_t>(sc[s] - 32);
}

namespace {

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 32-value types: one d (and m) for the block; scale 1 for both sixteens, min 1 where the
// type has a min (RowQuants starts with these: kernels/row_dot.cpp).
void unit_scales(const BlockOut& u, float d, float m) {
  u.scale[0] = u.scale[1] = 1;
  u.min[0] = u.min[1] = 0;
  u.d[0] = d;
  u.m[0] = m;
}

// Values j and j + 16 of a 32-value block from byte j's nibbles, through a level table.
void nibbles(const uint8_t* qs, const int8_t* levels, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = levels[qs[j] & 0xF];
    q[j + 16] = levels[qs[j] >> 4];
  }
}
constexpr int8_t kPlain[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// Q4_1: [f16 d][f16 m][16 bytes of nibbles]; value = d * q + m.
void q4_1(const uint8_t* b, const BlockOut& u) {
  if (u.q) nibbles(b + 4, kPlain, u.q);
  unit_scales(u, f16_at(b), -f16_at(b + 2));
  u.min[0] = u.min[1] = 1;
}

// Q5_0 / Q5_1: [f16 d]([f16 m])[u32 fifth bits][16 bytes of nibbles].
void five_bits(const uint8_t* qh_at, const uint8_t* qs, int offset, int8_t* q) {
  const uint32_t qh = u32_at(qh_at);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(((qs[j] & 0xF) | (((qh >> j) << 4) & 0x10)) - offset);
    q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - offset);
  }
}
void q5_0(const uint8_t* b, const BlockOut& u) {
  if (u.q) five_bits(b + 2, b + 6, 16, u.q);
  unit_scales(u, f16_at(b), 0.0f);
}
void q5_1(const uint8_t* b, const BlockOut& u) {
  if (u.q) five_bits(b + 4, b + 8, 0, u.q);
  unit_scales(u, f16_at(b), -f16_at(b + 2));
  u.min[0] = u.min[1] = 1;
}

// IQ4_NL: [f16 d][16 bytes of nibbles] through the non-linear levels.
void iq4_nl(const uint8_t* b, const BlockOut& u) {
  if (u.q) nibbles(b + 2, kIq4Levels, u.q);
  unit_scales(u, f16_at(b), 0.0f);
}

// MXFP4: [E8M0 exponent][16 bytes of FP4 nibbles].
void mxfp4(const uint8_t* b, const BlockOut& u) {
  if (u.q) nibbles(b + 1, kFp4Levels, u.q);
  unit_scales(u, e8m0_half(b[0]), 0.0f);
}

// The K-quants' super-block scales repeat over its eight 32-value groups.
void super_scales(const BlockOut& u, float d, float dmin) {
  for (int g = 0; g < 8; ++g) {
    u.d[g] = d;
    u.m[g] = dmin;
  }
}

// Q4_K / Q5_K pack 8 sub-block scales and mins in 6 bits each into 12 bytes.
void k4_scale_min(int j, const uint8_t* q, int16_t& sc, int16_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
void k4_scales(const uint8_t* scales, const BlockOut& u) {
  for (int s = 0; s < 8; ++s) {  // sub-block s of 32 values is sixteens 2s, 2s + 1
    k4_scale_min(s, scales, u.scale[2 * s], u.min[2 * s]);
    u.scale[2 * s + 1] = u.scale[2 * s];
    u.min[2 * s + 1] = u.min[2 * s];
  }
}

// Q4_K: [f16 d][f16 dmin][12 bytes of scales][128 bytes]: per 64 values, 32 bytes whose low
// nibbles are the first 32 values and high nibbles the next 32.
void q4_k(const uint8_t* b, const BlockOut& u) {
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4 && u.q; ++c)
    for (int l = 0; l < 32; ++l) {
      u.q[64 * c + l] = static_cast<int8_t>(qs[32 * c + l] & 0xF);
      u.q[64 * c + 32 + l] = static_cast<int8_t>(qs[32 * c + l] >> 4);
    }
  k4_scales(b + 4, u);
  super_scales(u, f16_at(b), f16_at(b + 2));
}

// Q5_K: Q4_K's layout with 32 bytes of fifth bits (bit 2c / 2c + 1 of byte l for the 64-chunk c).
void q5_k(const uint8_t* b, const BlockOut& u) {
  const uint8_t *qh = b + 16, *qs = b + 48;
  for (int c = 0; c < 4 && u.q; ++c)
    for (int l = 0; l < 32; ++l) {
      u.q[64 * c + l] = static_cast<int8_t>((qs[32 * c + l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4));
      u.q[64 * c + 32 + l] = static_cast<int8_t>((qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
    }
  k4_scales(b + 4, u);
  super_scales(u, f16_at(b), f16_at(b + 2));
}

// Q6_K: [128 bytes of low nibbles][64 bytes of high bit pairs][16 int8 scales][f16 d]; q - 32.
void q6_k(const uint8_t* b, const BlockOut& u) {
  for (int n = 0; n < 2 && u.q; ++n) {
    const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
    int8_t* q = u.q + 128 * n;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
  for (int s = 0; s < 16; ++s) {
    u.scale[s] = static_cast<int8_t>(b[192 + s]);
    u.min[s] = 0;
  }
  super_scales(u, f16_at(b + 208), 0.0f);
}

// Q2_K: [16 bytes: 4-bit scale | 4-bit min][64 bytes of 2-bit values][f16 d][f16 dmin]. Per 128
// values, 32 bytes: value 32j + l is bits 2j..2j+1 of byte l.
void q2_k(const uint8_t* b, const BlockOut& u) {
  for (int n = 0; n < 2 && u.q; ++n)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) u.q[128 * n + 32 * j + l] = static_cast<int8_t>((b[16 + 32 * n + l] >> (2 * j)) & 3);
  for (int s = 0; s < 16; ++s) {
    u.scale[s] = b[s] & 0xF;
    u.min[s] = b[s] >> 4;
  }
  super_scales(u, f16_at(b + 80), f16_at(b + 82));
}

// Q3_K: [32 bytes of high bits][64 bytes of 2-bit values][12 bytes of 6-bit scales][f16 d]; a
// value is its two bits minus 4 where its high bit is clear.
void q3_k(const uint8_t* b, const BlockOut& u) {
  const uint8_t *hmask = b, *qs = b + 32;
  for (int n = 0; n < 2 && u.q; ++n)
    for (int j = 0; j < 4; ++j) {
      const int bit = 4 * n + j;
      for (int l = 0; l < 32; ++l) {
        const int low = (qs[32 * n + l] >> (2 * j)) & 3;
        u.q[128 * n + 32 * j + l] = static_cast<int8_t>(low - ((hmask[l] >> bit) & 1 ? 0 : 4));
      }
    }
  q3k_scales(b, u.scale);
  for (int s = 0; s < 16; ++s) u.min[s] = 0;
  super_scales(u, f16_at(b + 108), 0.0f);
}

// IQ4_XS: [f16 d][u16 high scale bits][4 bytes of low scale nibbles][128 bytes of nibbles]; per
// 32 values a 6-bit scale (minus 32) and 16 bytes as IQ4_NL's.
void iq4_xs(const uint8_t* b, const BlockOut& u) {
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  for (int g = 0; g < 8; ++g) {
    const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | (((scales_h >> (2 * g)) & 3) << 4);
    u.scale[2 * g] = u.scale[2 * g + 1] = static_cast<int16_t>(ls - 32);
    u.min[2 * g] = u.min[2 * g + 1] = 0;
    if (u.q) nibbles(b + 8 + 16 * g, kIq4Levels, u.q + 32 * g);
  }
  super_scales(u, f16_at(b), 0.0f);
}

const BlockCodec kCodecs[] = {
    {DType::Q4_1, 32, 20, true, true, q4_1},       {DType::Q5_0, 32, 22, false, false, q5_0},
    {DType::Q5_1, 32, 24, true, true, q5_1},       {DType::Q2_K, 256, 84, true, true, q2_k},
    {DType::Q3_K, 256, 110, false, false, q3_k},   {DType::Q4_K, 256, 144, true, true, q4_k},
    {DType::Q5_K, 256, 176, true, true, q5_k},     {DType::Q6_K, 256, 210, false, false, q6_k},
    {DType::IQ4_NL, 32, 18, false, false, iq4_nl}, {DType::IQ4_XS, 256, 136, false, false, iq4_xs},
    {DType::MXFP4, 32, 17, false, false, mxfp4},
};

}  // namespace

const BlockCodec* block_codec(DType t) {
  for (const BlockCodec& c : kCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

void blocks_to_float(DType t, const uint8_t* src, float* dst, size_t n) {
  const BlockCodec* c = block_codec(t);
  KVLM_CHECK(c, dtype_name(t), " is not a row-quant type");
  UnpackedBlock u;
  const BlockOut out{u.q, u.scale, u.min, u.d, u.m};
  for (size_t i = 0; i < n / c->values; ++i) {
    c->unpack(src + i * c->bytes, out);
    float* y = dst + i * c->values;
    for (int v = 0; v < c->values; ++v) {
      const float dl = u.d[v / 32] * u.scale[v / 16];
      // Without a min the value is dl * q alone: "- 0 * 0" would turn a -0 into +0.
      y[v] = c->has_min ? dl * u.q[v] - u.m[v / 32] * u.min[v / 16] : dl * u.q[v];
    }
  }
}

}  // namespace kvlm
