// KV element types and their row codecs. A row is one position's K (or V) for all KV heads:
//   f32   kv_dim floats
//   f16   kv_dim f16 values (llama.cpp's default KV type; finite values beyond its range are
//         stored as +-65504, where llama.cpp's would become infinities)
//   bf16  kv_dim bf16 values
//   int8  kv_dim int8 + one f32 scale per head (symmetric, per token per head)
//   int4  kv_dim/2 bytes of nibbles + per group of 32 values an f32 scale and zero point
//         (asymmetric: x = zero + scale * q, q in 0..15)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace kvlm {

// Element types come from the one dtype table (kernels/dtype.h): f32, f16, bf16, int8 and int4 serve
// KV pages (parse_dtype(name, kInKvPages, ...)).

// Layout of one quantized row for a given kv_dim / head_dim.
struct KvRowCodec {
  DType dtype;
  int kv_dim, head_dim;
  // Inline: attention asks for both for every run of rows it reads, per head.
  size_t data_bytes() const {  // the packed values
    switch (dtype) {
      case DType::F32: return static_cast<size_t>(kv_dim) * 4;
      case DType::F16:
      case DType::BF16: return static_cast<size_t>(kv_dim) * 2;
      case DType::Int8: return kv_dim;
      case DType::Int4: return kv_dim / 2;
      default: return other_data_bytes();
    }
  }
  int n_params() const {  // f32 side values: scales (int8), scales + zeros (int4)
    switch (dtype) {
      case DType::Int8: return kv_dim / head_dim;
      case DType::Int4: return 2 * (kv_dim / 32);
      default: return 0;
    }
  }
  size_t bytes() const { return data_bytes() + n_params() * sizeof(float); }
  // One head's share of a row's values, where head h's values and its parameters start (the
  // parameters' only where a head holds whole parameter groups: int8 always, int4 at head sizes
  // of 32s).
  size_t head_data_bytes() const { return data_bytes() / (kv_dim / head_dim); }
  size_t head_data_offset(int h) const { return head_data_bytes() * h; }
  size_t head_param_offset(int h) const { return static_cast<size_t>(n_params() / (kv_dim / head_dim)) * h; }

  void encode(const float* x, uint8_t* data, float* params) const;
  // Decodes head h's head_dim values of a row into out.
  void decode_head(const uint8_t* data, const float* params, int h, float* out) const;  // AVX2 when present
  void decode_head_scalar(const uint8_t* data, const float* params, int h, float* out) const;  // its twin
  // Head h of n consecutive rows into out[n][head_dim]: what attention calls, a run at a time
  // (per-row calls cost as much as the decoding at long contexts).
  void decode_rows(const uint8_t* data, const float* params, int h, int n, float* out) const;

 private:
  size_t other_data_bytes() const;  // plain values of the dtype table's other types
};

// x rounded to f16 as KV rows store it: to nearest even, finite values beyond f16's range
// saturated to +-65504 (an infinity in a key turns every score of its head into NaN).
uint16_t f32_to_f16_saturated(float x);

// Whether a codec can hold rows of this shape (int4 needs kv_dim divisible by 32).
bool kv_dtype_fits(DType t, int kv_dim);

}  // namespace kvlm
