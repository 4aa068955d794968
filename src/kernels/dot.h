// Vector primitives with runtime ISA dispatch: an AVX2+FMA version where the CPU has it,
// and a scalar twin that tests compare against (tests/kernels_test.cpp).
#pragma once
#include <cstddef>

namespace kvlm {

// sum_i a[i] * b[i]
float dot_f32(const float* a, const float* b, size_t n);
// y[i] += alpha * x[i]
void axpy_f32(float alpha, const float* x, float* y, size_t n);

namespace scalar {
float dot_f32(const float* a, const float* b, size_t n);
void axpy_f32(float alpha, const float* x, float* y, size_t n);
}  // namespace scalar

// Name of the instruction set the dispatched kernels use ("avx2" or "scalar").
const char* kernel_isa();

}  // namespace kvlm
