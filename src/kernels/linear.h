// Linear: a dense layer y[n][out] = x[n][in] * W^T + b, with W in f32, f16, bf16, Q8_0, Q4_0 or a
// row-quant type (Q4_1 ... Q6_K, IQ4_NL, IQ4_XS, MXFP4). Q8_0 and Q4_0 are repacked at load into
// groups of 8 interleaved rows (kernels/qgemm.h); the row-quant types run as the file stores
// them (kernels/row_dot.h);
// activations are quantized to int8 per call (as llama.cpp does) and multiplied in int8: on AMX
// tiles where the CPU has them and 16 or more tokens come at once (kernels/qgemm_amx.h, and for
// the row-quant types kernels/row_tiles.h, 16 rows unpacked once per call).
// A token's outputs are the same in any batch for Q8_0 / Q4_0. For the row-quant types they are
// the same in any batch that takes the same path (1-15 tokens, or 16 and more on tiles); the
// two paths add their float terms in different orders, so they differ by rounding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/dtype.h"
#include "kernels/quantize.h"

namespace kvlm {

class Context;


struct Linear {
  int out = 0, in = 0;
  DType fmt = DType::F32;
  Buffer<float> w;          // [out][in] (F32)
  Buffer<uint16_t> w16;     // [out][in] (BF16 or F16)
  Buffer<uint8_t> packed;   // Q8_0, Q4_0: ceil(out/8) groups of 8 interleaved rows; row-quants: GGUF rows
  Buffer<float> b;          // [out], or empty when the layer has no bias

  // Runs on ctx's pool, reusing its quantized-activation buffer; the short form on this
  // thread's default context.
  void forward(const float* x, int n, float* y, Context& ctx) const;
  void forward(const float* x, int n, float* y) const;
  // Re-encodes the weights (quantized ones through the f32 values they stand for); returns false
  // (and keeps f32) when `in` is not a multiple of 32.
  bool convert(DType f);
  size_t bytes() const;  // bytes of weights and bias as stored
};


}  // namespace kvlm
