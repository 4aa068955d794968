// Vector primitives with runtime ISA dispatch: an AVX2+FMA version where the CPU has it,
// and a scalar twin that tests compare against (tests/kernels_test.cpp).
#pragma once
#include <cstddef>

namespace kvlm {

// sum_i a[i] * b[i]
float dot_f32(const float* a, const float* b, size_t n);
// out[t] = sum_i a[i] * b[t * b_stride + i] for t < 4: one row against four (shares a's loads).
void dot4_f32(const float* a, const float* b, size_t b_stride, size_t n, float* out);
// y[i] += alpha * x[i]
void axpy_f32(float alpha, const float* x, float* y, size_t n);

namespace scalar {
float dot_f32(const float* a, const float* b, size_t n);
void dot4_f32(const float* a, const float* b, size_t b_stride, size_t n, float* out);
void axpy_f32(float alpha, const float* x, float* y, size_t n);
}  // namespace scalar

// Name of the instruction set the dispatched kernels use (core/cpu.h's table: "avx2", "scalar").
const char* kernel_isa();

}  // namespace kvlm
