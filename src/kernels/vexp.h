// exp(x) for 8 floats with AVX2: Cephes' single-precision polynomial after range reduction by
// ln 2 (about 2 ulp over the float range; inputs below -87.3 give 0, above 88.7 give inf).
// Shared by the activations and attention's softmax, so their results do not depend on
// which lane or tail a value fell in: tails go through the same vector code.
#pragma once
#include "core/cpu.h"
#if KVLM_X86
#include <immintrin.h>

namespace kvlm {

// The polynomial's constants, named once for every vector width (attention_avx512.cpp's 16-lane
// exponential must stay this arithmetic bit for bit).
struct ExpPoly {
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 in two parts
  static constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  static constexpr float kLo = -87.3365448f, kHi = 88.7228391f;  // below: 0; above: inf
};

// exp(x) = p * 2^n for K vectors x already clamped to the float range: p into x, n into n. The
// steps go across the K vectors in turn: one exponential is a chain of ~15 dependent operations,
// and issued one after another the chains filled the FP scheduler. Every vector gets the same
// operations whatever K is, so the results do not depend on it.
template <int K>
__attribute__((target("avx2,fma"))) inline void exp8_reduced(__m256* x, __m256* n) {
  __m256 r[K], p[K];
  for (int k = 0; k < K; ++k)
    n[k] = _mm256_round_ps(_mm256_mul_ps(x[k], _mm256_set1_ps(ExpPoly::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  for (int k = 0; k < K; ++k) r[k] = _mm256_fnmadd_ps(n[k], _mm256_set1_ps(ExpPoly::kLn2Hi), x[k]);  // x - n ln2, in two parts
  for (int k = 0; k < K; ++k) r[k] = _mm256_fnmadd_ps(n[k], _mm256_set1_ps(ExpPoly::kLn2Lo), r[k]);
  for (int k = 0; k < K; ++k) p[k] = _mm256_fmadd_ps(_mm256_set1_ps(ExpPoly::kP[0]), r[k], _mm256_set1_ps(ExpPoly::kP[1]));
  for (int k = 0; k < K; ++k) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(ExpPoly::kP[2]));
  for (int k = 0; k < K; ++k) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(ExpPoly::kP[3]));
  for (int k = 0; k < K; ++k) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(ExpPoly::kP[4]));
  for (int k = 0; k < K; ++k) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(ExpPoly::kP[5]));
  for (int k = 0; k < K; ++k) x[k] = _mm256_fmadd_ps(p[k], _mm256_mul_ps(r[k], r[k]), _mm256_add_ps(r[k], _mm256_set1_ps(1.0f)));
}

__attribute__((target("avx2,fma"))) inline __m256 exp8_avx2(__m256 x) {
  const __m256 hi = _mm256_set1_ps(ExpPoly::kHi), lo = _mm256_set1_ps(ExpPoly::kLo);
  const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ), under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  // min/max return their second operand where either is NaN: a NaN stays NaN throughout (its
  // 2^n below is a finite number), and neither mask holds for it.
  __m256 p = _mm256_max_ps(lo, _mm256_min_ps(hi, x)), n;
  exp8_reduced<1>(&p, &n);
  // 2^n in two steps, so n = 128 (x near the top of the range) does not overflow the exponent.
  const __m256i e = _mm256_cvtps_epi32(n);
  const __m256i e1 = _mm256_srai_epi32(e, 1), e2 = _mm256_sub_epi32(e, e1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
}

// exp8_avx2 for x <= 0 (and NaN), as the softmax takes it (a score less the span's max), K vectors
// in place: no overflow to guard, and 2^n (n >= -126) is one normal float, so the scale is one
// multiply. The same results as exp8_avx2 bit for bit: multiplying by 2^n in one step or two
// rounds once either way. A tenth of a long-context int8 step was spent in exp; this drops a
// third of its operations, and four vectors at a time ran a span's softmax a quarter faster
// than one (two: a fifth).
template <int K>
__attribute__((target("avx2,fma"))) inline void exp8xk_nonpositive_avx2(__m256* x) {
  const __m256 lo = _mm256_set1_ps(ExpPoly::kLo);
  __m256 under[K], p[K], n[K];
  for (int k = 0; k < K; ++k) {
    under[k] = _mm256_cmp_ps(x[k], lo, _CMP_LT_OQ);
    p[k] = _mm256_max_ps(lo, x[k]);  // NaN stays NaN, as in exp8_avx2
  }
  exp8_reduced<K>(p, n);
  for (int k = 0; k < K; ++k) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n[k]), _mm256_set1_epi32(127));  // >= 1
    x[k] = _mm256_andnot_ps(under[k], _mm256_mul_ps(p[k], _mm256_castsi256_ps(_mm256_slli_epi32(e, 23))));  // below the range: 0
  }
}

__attribute__((target("avx2,fma"))) inline __m256 exp8_nonpositive_avx2(__m256 x) {
  exp8xk_nonpositive_avx2<1>(&x);
  return x;
}

}  // namespace kvlm
#endif  // KVLM_X86
