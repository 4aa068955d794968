// The horizontal sum of a vector's eight float lanes, in the one fixed order the AVX2 dots share:
// (0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then the last pair. Shared so that dots written in
// different files reduce alike.
#pragma once
#include "core/cpu.h"

#if KVLM_X86
#include <immintrin.h>

namespace kvlm {

__attribute__((target("avx2,fma"))) inline float hsum8_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace kvlm
#endif  // KVLM_X86
