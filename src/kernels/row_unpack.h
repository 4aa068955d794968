// The SIMD kernels behind unpack_row and row_dot_stored (kernels/row_dot.h).
#pragma once
#include <cstdint>

#include "kernels/row_dot.h"

namespace kvlm {

// The fixed order every row-quant dot sums its 8 float lanes in, twins and kernels alike:
// (0+4, 1+5, 2+6, 3+7), then (0+2) + (1+3).
inline float sum_8_lanes(const float l[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

// Unpacks a stored row with AVX2, its scale_lanes included (the caller checked the CPU); false
// where the type has no AVX2 unpacker.
bool unpack_row_avx2(const uint8_t* row, RowQuants& u);
// One token's dot from a stored row with AVX2 (the caller checked the CPU); false where the type
// has no such kernel.
bool row_dot_stored_avx2(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out);

}  // namespace kvlm
