// Stored-half weights (f16, bf16) against f32 activations: the row dot, and the many-token
// product that prefill runs. Each token gets bit for bit what the row dot gives it alone, so a
// decode step equals the prefill of the same position.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace kvlm {

// sum_i w[i] * x[i] over stored bf16 / f16 values.
float dot_bf16(const uint16_t* w, const float* x, int n);
float dot_f16(const uint16_t* w, const float* x, int n);

// y[t * y_stride + r] = dot(w + r * in, x + t * in) + (bias ? bias[r] : 0) for rows r0 <= r < r1
// and tokens 0 <= t < n; fmt is F16 or BF16. Tiles of rows and tokens share each load, where a
// dot per (row, token) streamed every token's activations once per row.
void half_rows_times_tokens(DType fmt, const uint16_t* w, const float* bias, int in, int r0, int r1, const float* x,
                            int n, float* y, int y_stride);

namespace scalar {
float dot_bf16(const uint16_t* w, const float* x, int n);
float dot_f16(const uint16_t* w, const float* x, int n);
}  // namespace scalar

}  // namespace kvlm
