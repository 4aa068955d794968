#include "kernels/dot.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu.h"
#include "kernels/hsum.h"

namespace kvlm {

namespace scalar {
float dot_f32(const float* a, const float* b, size_t n) {
  // Eight partial sums, like the SIMD version, so both round alike on long vectors.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
void axpy_f32(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void dot4_f32(const float* a, const float* b, size_t b_stride, size_t n, float* out) {
  for (int t = 0; t < 4; ++t) out[t] = dot_f32(a, b + t * b_stride, n);
}
}  // namespace scalar

#if KVLM_X86
namespace avx2 {
// dot_f32 and dot4_f32 sum in exactly the same order (two accumulators over alternating
// 8-lane chunks), so a token's result does not depend on whether it came in a batch: logits
// with the KV cache equal logits without it.
__attribute__((target("avx2,fma"))) static float dot_f32(const float* a, const float* b, size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  if (i + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    i += 8;
  }
  float s = hsum8_avx2(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
__attribute__((target("avx2,fma"))) static void dot4_f32(const float* a, const float* b, size_t bs, size_t n,
                                                         float* out) {
  __m256 acc0[4], acc1[4];
  for (int t = 0; t < 4; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
    for (int t = 0; t < 4; ++t) {
      acc0[t] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + t * bs + i), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + t * bs + i + 8), acc1[t]);
    }
  }
  const bool eight = i + 8 <= n;
  if (eight) {
    __m256 a0 = _mm256_loadu_ps(a + i);
    for (int t = 0; t < 4; ++t) acc0[t] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + t * bs + i), acc0[t]);
    i += 8;
  }
  for (int t = 0; t < 4; ++t) {
    float s = hsum8_avx2(_mm256_add_ps(acc0[t], acc1[t]));
    for (size_t k = i; k < n; ++k) s += a[k] * b[t * bs + k];
    out[t] = s;
  }
}
__attribute__((target("avx2,fma"))) static void axpy_f32(float alpha, const float* x, float* y, size_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}
}  // namespace avx2
#endif  // KVLM_X86

namespace {
struct Dispatch {
  float (*dot)(const float*, const float*, size_t);
  void (*dot4)(const float*, const float*, size_t, size_t, float*);
  void (*axpy)(float, const float*, float*, size_t);
  const char* isa;
};
// Chosen per call: the ISA is the calling thread's (its context's cap), and the check is a
// thread-local read next to a dot product of at least a head's width.
Dispatch dispatch() {
#if KVLM_X86
  if (isa_at_least(Isa::Avx2)) return {avx2::dot_f32, avx2::dot4_f32, avx2::axpy_f32, "avx2"};
#endif
  return {scalar::dot_f32, scalar::dot4_f32, scalar::axpy_f32, "scalar"};
}
}  // namespace

float dot_f32(const float* a, const float* b, size_t n) { return dispatch().dot(a, b, n); }
void axpy_f32(float alpha, const float* x, float* y, size_t n) { dispatch().axpy(alpha, x, y, n); }
void dot4_f32(const float* a, const float* b, size_t b_stride, size_t n, float* out) {
  dispatch().dot4(a, b, b_stride, n, out);
}
const char* kernel_isa() { return isa_name(thread_isa()); }

}  // namespace kvlm
