// Linear: a dense layer y[n][out] = x[n][in] * W^T + b, with W in f32, bf16, Q8_0 or Q4_0.
// Quantized weights are repacked at load into separate per-block scales and packed quants,
// rows contiguous: [out][in/32] scales, [out][in] int8 (Q8_0) or [out][in/2] nibbles (Q4_0).
// For those, activations are quantized to Q8_0 per call (as llama.cpp does) and dotted in int8.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvlm {

enum class WeightFormat { F32, BF16, Q8_0, Q4_0 };
const char* weight_format_name(WeightFormat f);
WeightFormat parse_weight_format(const std::string& s);  // "f32", "bf16", "q8_0", "q4_0"

struct Linear {
  int out = 0, in = 0;
  WeightFormat fmt = WeightFormat::F32;
  std::vector<float> w;        // [out][in] (F32)
  std::vector<uint16_t> w16;   // [out][in] (BF16)
  std::vector<float> scales;   // [out][in/32] (Q8_0, Q4_0)
  std::vector<uint8_t> quants; // [out][in] int8 (Q8_0) or [out][in/2] nibble pairs (Q4_0)
  std::vector<float> b;        // [out], or empty when the layer has no bias

  void forward(const float* x, int n, float* y) const;
  // Re-encodes the f32 weights; returns false (and keeps f32) when `in` is not a multiple of 32.
  bool convert(WeightFormat f);
  size_t bytes() const;  // bytes of weights and bias as stored
};

// Block quantization of one row (n a multiple of 32), llama.cpp's rounding.
void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q);
void quantize_row_q4_0(const float* x, int n, float* scales, uint8_t* q);

// Dot products of one weight row with one Q8_0-quantized activation row, nb blocks of 32.
float dot_q8_0(const float* ws, const int8_t* wq, const float* xs, const int8_t* xq, int nb);
float dot_q4_0(const float* ws, const uint8_t* wq, const float* xs, const int8_t* xq, int nb);
float dot_bf16(const uint16_t* w, const float* x, int n);

namespace scalar {
float dot_q8_0(const float* ws, const int8_t* wq, const float* xs, const int8_t* xq, int nb);
float dot_q4_0(const float* ws, const uint8_t* wq, const float* xs, const int8_t* xq, int nb);
float dot_bf16(const uint16_t* w, const float* x, int n);
}  // namespace scalar

}  // namespace kvlm
