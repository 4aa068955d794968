// f32 values into the ggml block types, as llama.cpp's quantizer writes them without an importance
// matrix: ggml-quants.c's quantize_row_*_ref for the legacy and K types, and quantize_iq4_nl /
// quantize_iq4_xs (a search of 7 steps) for the IQ4 types. Same arithmetic in the same order, so a
// file `kvlm quantize` writes equals llama-quantize's byte for byte (tests/quantize_test.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace kvlm {

// Whether quantize_blocks can write type t.
bool can_quantize_blocks(DType t);
// Narrows n values (a multiple of t's block) into t's file layout at dst.
void quantize_blocks(DType t, const float* src, uint8_t* dst, size_t n);

}  // namespace kvlm
