// The SIMD unpackers behind unpack_row (kernels/row_dot.h).
#pragma once
#include <cstdint>

#include "kernels/row_dot.h"

namespace kvlm {

// Unpacks a stored row with AVX2 (the caller checked the CPU); false where the type has no AVX2
// unpacker.
bool unpack_row_avx2(const uint8_t* row, RowQuants& u);

}  // namespace kvlm
