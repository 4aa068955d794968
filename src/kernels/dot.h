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

// Whether this CPU runs the AVX2+FMA kernels (checked once).
bool cpu_has_avx2();
bool cpu_has_f16c();  // the packed weights' f16 scales need it; part of cpu_has_avx2()
// Name of the instruction set the dispatched kernels use ("avx2" or "scalar").
const char* kernel_isa();

}  // namespace kvlm
