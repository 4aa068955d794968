// Row kernels shared by every user of a type (the dtype table, Linear, qgemm, the KV codecs).
#pragma once
#include <cstdint>

namespace kvlm {

// Symmetric int8 per block of `block` values (n a multiple of it): scale = amax / 127,
// q = round-to-nearest-even(x / scale). Q8_0 is block 32; the KV int8 codec's block is a head.
void quantize_symmetric_i8(const float* x, int n, int block, float* scales, int8_t* q);
// Block quantization of one row (n a multiple of 32), llama.cpp's rounding.
void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q);
void quantize_row_q4_0(const float* x, int n, float* scales, uint8_t* q);

namespace scalar {
void quantize_symmetric_i8(const float* x, int n, int block, float* scales, int8_t* q);
void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q);
}  // namespace scalar

}  // namespace kvlm
