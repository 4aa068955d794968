// Matrices of the row-quant types (kernels/ggml_blocks.h: Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL,
// IQ4_XS, MXFP4) run as the file stores them: a row is unpacked into int8 values with integer
// sub-scales (a few KB, in L1) and multiplied against int8-quantized activations, once per row
// for every token of the call (one token: straight from the stored row, where a kernel does
// that). Nothing is widened at load: memory is the file's.
//
// The activations come in blocks of the row's own (32 values, Q8_0; or a K-quant's 256, one scale
// as ggml's Q8_K), so d, m and the activation scale are constant over a block. The dot is exact
// integer arithmetic over a block (lane j: q * xq over values 4j..4j+3 of each 32, times the
// sixteen's scale; the min term: min * each sixteen's activation sum), then one fused
// multiply-add per lane and block with d * dx, in 8 float lanes (the min term's by block), summed
// in one fixed order. The scalar twin follows the same lanes and order, so every kernel is
// bit-identical to it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "kernels/dtype.h"
#include "kernels/qgemm.h"

namespace kvlm {

// Whether t is a row-quant type (runs through this file).
bool is_row_quant(DType t);

// One row in the common form of kernels/ggml_blocks.h, in one allocation (a Linear makes one per
// slice of rows it runs, dozens per decode step).
struct RowQuants {
  DType type = DType::F32;
  int in = 0;
  bool has_min = false;
  bool unsigned_q = false;     // every q >= 0
  int block = 32;              // values per stored block: the activations' block too
  int8_t* q;                   // [in]
  int16_t *scale, *min;        // [in / 16]
  // Per 32 values, its two sixteens' scales spread over 16 int16 lanes (8 each): the SIMD dot's
  // multiplier, laid out once per row instead of once per token.
  int16_t* scale_lanes;        // [in / 2]
  float *d, *m;                // [in / 32]
  RowQuants(DType t, int in_features);
  RowQuants(const RowQuants&) = delete;
  RowQuants& operator=(const RowQuants&) = delete;

 private:
  Buffer<uint8_t> storage_;
};

// Unpacks a stored row of u.in values (u.in / block values blocks) into u.
void unpack_row(const uint8_t* row, RowQuants& u);
// out[t] = dot(row, token t0 + t) for t < nt <= 4; a.block must be u.block.
void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out);

// out = dot(the stored row, token t of a) without unpacking, where a kernel for the type and CPU
// exists (Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS with AVX2); false otherwise. The same bits as unpack_row + row_dot.
bool row_dot_stored(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out);

namespace scalar {
void unpack_row(const uint8_t* row, RowQuants& u);
void row_dot(const RowQuants& u, const QuantizedActs& a, int t0, int nt, float* out);
}  // namespace scalar

}  // namespace kvlm
