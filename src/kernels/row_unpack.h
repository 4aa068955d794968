// The SIMD kernels behind unpack_row and row_dot_stored (kernels/row_dot.h).
#pragma once
#include <cstdint>

#include "kernels/row_dot.h"

namespace kvlm {

// Unpacks a stored row with AVX2 (the caller checked the CPU); false where the type has no AVX2
// unpacker.
bool unpack_row_avx2(const uint8_t* row, RowQuants& u);
// One token's dot from a stored row with AVX2 (the caller checked the CPU); false where the type
// has no such kernel.
bool row_dot_stored_avx2(DType type, const uint8_t* row, int in, const QuantizedActs& a, int t, float* out);

}  // namespace kvlm
