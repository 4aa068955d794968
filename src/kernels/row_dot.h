// Matrices of the row-quant types (kernels/ggml_blocks.h: Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL,
// IQ4_XS, MXFP4) run as the file stores them: a row is unpacked into int8 values with integer
// sub-scales (a few KB, in L1) and multiplied against Q8_0-quantized activations, once per row
// for every token of the call. Nothing is widened at load: memory is the file's.
//
// The dot is exact integer arithmetic per four values (q * xq summed, times the sixteen's scale),
// accumulated in 8 float lanes (lane j: values 4j..4j+3 of each 32), one fused multiply-add per
// lane and 32 values with d * dx; the min term (min * the sixteen's activation sum) likewise in 8
// lanes by group. The lanes are summed in one fixed order. The scalar twin follows the same
// lanes and order, so every kernel is bit-identical to it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "kernels/dtype.h"
#include "kernels/qgemm.h"

namespace kvlm {

// Whether t is a row-quant type (runs through this file).
bool is_row_quant(DType t);

// One row in the common form of kernels/ggml_blocks.h.
struct RowQuants {
  DType type = DType::F32;
  int in = 0;
  bool has_min = false;
  Buffer<int8_t> q;            // [in]
  Buffer<int16_t> scale, min;  // [in / 16]
  Buffer<float> d, m;          // [in / 32]
  RowQuants(DType t, int in_features);
};

// Unpacks a stored row of u.in values (u.in / block values blocks) into u.
void unpack_row(const uint8_t* row, RowQuants& u);
// out[t] = dot(row, token t0 + t) for t < nt <= 4.
void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out);

namespace scalar {
void unpack_row(const uint8_t* row, RowQuants& u);
void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out);
}  // namespace scalar

}  // namespace kvlm
