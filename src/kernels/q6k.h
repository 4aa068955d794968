// Q6_K matrices run as stored: GGUF rows of 256-value blocks (4-bit low parts, 2-bit high parts,
// 16 int8 scales of 16 values each, one f16 scale), against Q8_0-quantized activations.
// llama-quantize keeps the output matrix in Q6_K in its Q4_0/Q8_0/K files; widened to f32 it
// would read 4.9x the bytes per decode step, and narrowed to our Q4_0 it would lose precision.
//
// A row's dot is exact integer arithmetic per 32-value activation block (sum over its values of
// scale16 * (q - 32) * xq) accumulated in 8 float lanes of four values each, then summed in a fixed
// order: the scalar twin follows the same lanes and order, so the two are bit-identical.
#pragma once
#include <cstdint>

#include "kernels/qgemm.h"

namespace kvlm {

constexpr int kQ6kBlock = 256, kQ6kBlockBytes = 210;

// A block's 256 six-bit values (0..63, before the -32 offset) in value order; scale k covers
// values 16k..16k+15. The file decoder (kernels/dtype.cpp) and the scalar twin share it.
void q6k_unpack(const uint8_t* block, int q[kQ6kBlock]);

// dot(row, token t of a); `row` is in/256 Q6_K blocks, a.in == in.
float q6k_dot_row(const uint8_t* row, const QuantizedActs& a, int t);

namespace scalar {
float q6k_dot_row(const uint8_t* row, const QuantizedActs& a, int t);
}  // namespace scalar

}  // namespace kvlm
