// Reference dequantization of the stored types to f32, following ggml's block layouts
// (ggml-quants.c: dequantize_row_q8_0 / q4_0 / q4_K / q6_K). Checked against the PyPI gguf
// package in tests/gguf_test.cpp.
#include <cstring>

#include "core/half.h"
#include "io/tensor_source.h"

namespace kvlm {

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_K packs 8 sub-block scales and mins in 6 bits each into 12 bytes.
void q4k_scale_min(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void q8_0(const uint8_t* b, float* y) {
  float d = f16_at(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * q[i];
}

void q4_0(const uint8_t* b, float* y) {
  float d = f16_at(b);
  const uint8_t* q = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * ((q[i] & 0xF) - 8);
    y[i + 16] = d * ((q[i] >> 4) - 8);
  }
}

void q4_k(const uint8_t* b, float* y) {
  float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    q4k_scale_min(is, scales, sc, m);
    float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(is + 1, scales, sc, m);
    float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * (q[l] >> 4) - m2;
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = f16_at(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[n + l] = d * sc[is + 0] * q1;
      y[n + l + 32] = d * sc[is + 2] * q2;
      y[n + l + 64] = d * sc[is + 4] * q3;
      y[n + l + 96] = d * sc[is + 6] * q4;
    }
  }
}

}  // namespace

void dequantize(DType t, const uint8_t* src, float* dst, size_t n) {
  const size_t block = dtype_block(t), bytes = dtype_block_bytes(t);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default:
      break;
  }
  void (*fn)(const uint8_t*, float*) = t == DType::Q8_0 ? q8_0 : t == DType::Q4_0 ? q4_0 : t == DType::Q4_K ? q4_k : q6_k;
  for (size_t i = 0; i < n / block; ++i) fn(src + i * bytes, dst + i * block);
}

}  // namespace kvlm
