// Tests only (the kvlm_kernels_avx512_emulated objects, built with KVLM_AVX512_EMULATION=1): the
// AVX-512 intrinsics kvlm's AVX-512 kernels use, emulated lane by lane in plain C++, so those
// kernels run on a CPU without AVX-512 and their twin tests check their logic (masks, shuffles,
// the order of the sums) where CI has only AVX2. Each function follows Intel's pseudo-code for its
// instruction; the kernels are compiled for AVX2 (KVLM_AVX512_TARGET in core/cpu.h), so their AVX2
// intrinsics stay real. Hand-written because no emulator runs here (Intel's SDE is not packaged,
// QEMU's TCG has no AVX-512); it covers exactly the intrinsics the kernels call, and a kernel that
// starts using another one fails to build (every x86-64 test build compiles the emulation).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/half.h"

namespace kvlm::avx512_emulation {

#define KVLM_EMU inline __attribute__((target("avx2,fma,f16c")))

template <class T, int N>
struct Lanes {
  T v[N];
};
template <class T, class V>
KVLM_EMU Lanes<T, sizeof(V) / sizeof(T)> lanes(const V& x) {
  Lanes<T, sizeof(V) / sizeof(T)> l;
  std::memcpy(l.v, &x, sizeof x);
  return l;
}
template <class V, class T, int N>
KVLM_EMU V vec(const Lanes<T, N>& l) {
  static_assert(sizeof(V) == sizeof(T) * N);
  V x;
  std::memcpy(&x, l.v, sizeof x);
  return x;
}

// Lane-wise op on two vectors viewed as lanes of T.
template <class T, class V, class Op>
KVLM_EMU V zip(V a, V b, Op op) {
  auto x = lanes<T>(a), y = lanes<T>(b);
  for (auto i = 0u; i < sizeof(V) / sizeof(T); ++i) x.v[i] = op(x.v[i], y.v[i]);
  return vec<V>(x);
}

KVLM_EMU __m512i mm512_setzero_si512() { return vec<__m512i>(Lanes<int32_t, 16>{}); }
KVLM_EMU __m512i mm512_set1_epi8(char c) {
  Lanes<int8_t, 64> l;
  for (auto& x : l.v) x = static_cast<int8_t>(c);
  return vec<__m512i>(l);
}
KVLM_EMU __m512 mm512_set1_ps(float f) {
  Lanes<float, 16> l;
  for (auto& x : l.v) x = f;
  return vec<__m512>(l);
}
KVLM_EMU __m512i mm512_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8, int e9,
                                  int e10, int e11, int e12, int e13, int e14, int e15) {
  return vec<__m512i>(Lanes<int32_t, 16>{{e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15}});
}
KVLM_EMU __m512i mm512_loadu_si512(const void* p) {
  __m512i x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
KVLM_EMU __m512 mm512_loadu_ps(const float* p) {
  __m512 x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
KVLM_EMU void mm512_storeu_ps(void* p, __m512 x) { std::memcpy(p, &x, sizeof x); }

KVLM_EMU __m512i mm512_and_si512(__m512i a, __m512i b) {
  return zip<uint64_t>(a, b, [](uint64_t x, uint64_t y) { return x & y; });
}
KVLM_EMU __m512i mm512_or_si512(__m512i a, __m512i b) {
  return zip<uint64_t>(a, b, [](uint64_t x, uint64_t y) { return x | y; });
}
KVLM_EMU __m512i mm512_xor_si512(__m512i a, __m512i b) {
  return zip<uint64_t>(a, b, [](uint64_t x, uint64_t y) { return x ^ y; });
}
KVLM_EMU __m512i mm512_sub_epi32(__m512i a, __m512i b) {
  return zip<uint32_t>(a, b, [](uint32_t x, uint32_t y) { return x - y; });
}
KVLM_EMU __m512i mm512_mullo_epi32(__m512i a, __m512i b) {
  return zip<uint32_t>(a, b, [](uint32_t x, uint32_t y) { return x * y; });
}
KVLM_EMU __m512 mm512_mul_ps(__m512 a, __m512 b) {
  return zip<float>(a, b, [](float x, float y) { return x * y; });
}
KVLM_EMU __m512 mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  auto x = lanes<float>(a), y = lanes<float>(b), z = lanes<float>(c);
  for (int i = 0; i < 16; ++i) z.v[i] = std::fma(x.v[i], y.v[i], z.v[i]);  // one rounding, as vfmadd
  return vec<__m512>(z);
}

// Shifts by a count above the lane's width give zero, as the instructions do.
template <class T>
KVLM_EMU __m512i shift(__m512i a, unsigned n, bool left) {
  auto x = lanes<T>(a);
  for (auto& e : x.v) e = n >= 8 * sizeof(T) ? T(0) : left ? T(e << n) : T(e >> n);
  return vec<__m512i>(x);
}
KVLM_EMU __m512i mm512_srli_epi16(__m512i a, unsigned n) { return shift<uint16_t>(a, n, false); }
KVLM_EMU __m512i mm512_slli_epi16(__m512i a, unsigned n) { return shift<uint16_t>(a, n, true); }
KVLM_EMU __m512i mm512_slli_epi32(__m512i a, unsigned n) { return shift<uint32_t>(a, n, true); }

KVLM_EMU __m512 mm512_cvtepi32_ps(__m512i a) {
  auto x = lanes<int32_t>(a);
  Lanes<float, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = static_cast<float>(x.v[i]);  // the current rounding mode, as vcvtdq2ps
  return vec<__m512>(r);
}
KVLM_EMU __m512i mm512_maskz_cvtepi8_epi32(__mmask16 k, __m128i a) {
  auto x = lanes<int8_t>(a);
  Lanes<int32_t, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = (k >> i) & 1 ? x.v[i] : 0;
  return vec<__m512i>(r);
}
KVLM_EMU __m512i mm512_maskz_cvtepu16_epi32(__mmask16 k, __m256i a) {
  auto x = lanes<uint16_t>(a);
  Lanes<int32_t, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = (k >> i) & 1 ? x.v[i] : 0;
  return vec<__m512i>(r);
}
KVLM_EMU __m512 mm512_cvtph_ps(__m256i a) {
  auto x = lanes<uint16_t>(a);
  Lanes<float, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = f16_to_f32(x.v[i]);  // exact, subnormals included
  return vec<__m512>(r);
}
KVLM_EMU __m512i mm512_mask_blend_epi64(__mmask8 k, __m512i a, __m512i b) {
  auto x = lanes<uint64_t>(a), y = lanes<uint64_t>(b);
  for (int i = 0; i < 8; ++i) x.v[i] = (k >> i) & 1 ? y.v[i] : x.v[i];
  return vec<__m512i>(x);
}
KVLM_EMU __m512i mm512_permutexvar_epi32(__m512i idx, __m512i a) {
  auto i32 = lanes<uint32_t>(idx), x = lanes<uint32_t>(a);
  Lanes<uint32_t, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = x.v[i32.v[i] & 15];
  return vec<__m512i>(r);
}
KVLM_EMU __m512i mm512_broadcast_i64x4(__m256i a) {
  auto x = lanes<uint64_t>(a);
  Lanes<uint64_t, 8> r;
  for (int i = 0; i < 8; ++i) r.v[i] = x.v[i % 4];
  return vec<__m512i>(r);
}
KVLM_EMU __m256 mm512_extractf32x8_ps(__m512 a, int half) {
  auto x = lanes<float>(a);
  Lanes<float, 8> r;
  for (int i = 0; i < 8; ++i) r.v[i] = x.v[8 * (half & 1) + i];
  return vec<__m256>(r);
}
KVLM_EMU __m256 mm512_castps512_ps256(__m512 a) { return mm512_extractf32x8_ps(a, 0); }
KVLM_EMU __m512 mm512_castsi512_ps(__m512i a) { return vec<__m512>(lanes<float>(a)); }

// vpdpbusd: each int32 lane plus the four products of a's unsigned bytes with b's signed ones,
// wrapping (no saturation).
template <class V>
KVLM_EMU V dpbusd(V src, V a, V b) {
  auto s = lanes<uint32_t>(src);
  auto u = lanes<uint8_t>(a);
  auto q = lanes<int8_t>(b);
  for (auto i = 0u; i < sizeof(V) / 4; ++i) {
    int32_t d = 0;
    for (int k = 0; k < 4; ++k) d += static_cast<int32_t>(u.v[4 * i + k]) * q.v[4 * i + k];
    s.v[i] += static_cast<uint32_t>(d);
  }
  return vec<V>(s);
}
KVLM_EMU __m512i mm512_dpbusd_epi32(__m512i src, __m512i a, __m512i b) { return dpbusd(src, a, b); }
KVLM_EMU __m256i mm256_dpbusd_epi32(__m256i src, __m256i a, __m256i b) { return dpbusd(src, a, b); }
// vpdpwssd: each int32 lane plus the two products of a's and b's signed int16 pairs, wrapping.
KVLM_EMU __m512i mm512_dpwssd_epi32(__m512i src, __m512i a, __m512i b) {
  auto s = lanes<uint32_t>(src);
  auto x = lanes<int16_t>(a), y = lanes<int16_t>(b);
  for (int i = 0; i < 16; ++i)
    s.v[i] += static_cast<uint32_t>(static_cast<int32_t>(x.v[2 * i]) * y.v[2 * i] + static_cast<int32_t>(x.v[2 * i + 1]) * y.v[2 * i + 1]);
  return vec<__m512i>(s);
}

// vdpbf16ps: per f32 lane, src plus the products of a's and b's bf16 pairs, the odd element's
// first, each step one fused multiply-add with denormal inputs read as zero and a denormal result
// flushed to zero (checked against the instruction on a Zen 4).
KVLM_EMU float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
KVLM_EMU float bf16_lane(uint16_t h) { return flush_denormal(bf16_to_f32(h)); }
KVLM_EMU __m512 mm512_dpbf16_ps(__m512 src, __m512bh a, __m512bh b) {
  auto s = lanes<float>(src);
  auto x = lanes<uint16_t>(a), y = lanes<uint16_t>(b);
  for (int i = 0; i < 16; ++i) {
    float t = flush_denormal(s.v[i]);
    t = flush_denormal(std::fma(bf16_lane(x.v[2 * i + 1]), bf16_lane(y.v[2 * i + 1]), t));
    s.v[i] = flush_denormal(std::fma(bf16_lane(x.v[2 * i]), bf16_lane(y.v[2 * i]), t));
  }
  return vec<__m512>(s);
}
// vcvtne2ps2bf16: words 0-15 from b, 16-31 from a; nearest even, denormals to zero, NaN quieted.
KVLM_EMU uint16_t bf16_of(float f) { return f32_to_bf16(flush_denormal(f)); }
KVLM_EMU __m512bh mm512_cvtne2ps_pbh(__m512 a, __m512 b) {
  auto x = lanes<float>(a), y = lanes<float>(b);
  Lanes<uint16_t, 32> r;
  for (int i = 0; i < 16; ++i) r.v[i] = bf16_of(y.v[i]), r.v[16 + i] = bf16_of(x.v[i]);
  return vec<__m512bh>(r);
}
KVLM_EMU __m512i mm512_rol_epi32(__m512i a, int n) {
  auto x = lanes<uint32_t>(a);
  for (auto& v : x.v) v = (v << (n & 31)) | (v >> ((32 - n) & 31));
  return vec<__m512i>(x);
}
// vpermt2d / vpermt2w: each lane from a or (index bit 4 / 5 set) b.
KVLM_EMU __m512i mm512_permutex2var_epi32(__m512i a, __m512i idx, __m512i b) {
  auto x = lanes<uint32_t>(a), i32 = lanes<uint32_t>(idx), y = lanes<uint32_t>(b);
  Lanes<uint32_t, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = (i32.v[i] & 16) ? y.v[i32.v[i] & 15] : x.v[i32.v[i] & 15];
  return vec<__m512i>(r);
}
KVLM_EMU __m512i mm512_permutex2var_epi16(__m512i a, __m512i idx, __m512i b) {
  auto x = lanes<uint16_t>(a), i16 = lanes<uint16_t>(idx), y = lanes<uint16_t>(b);
  Lanes<uint16_t, 32> r;
  for (int i = 0; i < 32; ++i) r.v[i] = (i16.v[i] & 32) ? y.v[i16.v[i] & 31] : x.v[i16.v[i] & 31];
  return vec<__m512i>(r);
}
KVLM_EMU __m512i mm512_set1_epi32(int v) {
  Lanes<int32_t, 16> l;
  for (auto& x : l.v) x = v;
  return vec<__m512i>(l);
}
KVLM_EMU void mm512_storeu_si512(void* p, __m512i x) { std::memcpy(p, &x, sizeof x); }
KVLM_EMU __m512 mm512_setzero_ps() { return vec<__m512>(Lanes<float, 16>{}); }
KVLM_EMU __m512 mm512_add_ps(__m512 a, __m512 b) {
  return zip<float>(a, b, [](float x, float y) { return x + y; });
}
KVLM_EMU __m512i mm512_zextsi128_si512(__m128i a) {
  auto x = lanes<uint32_t>(a);
  Lanes<uint32_t, 16> r{};
  for (int i = 0; i < 4; ++i) r.v[i] = x.v[i];
  return vec<__m512i>(r);
}
// vinserti32x4: block `imm` (of four 128-bit blocks) replaced by b.
KVLM_EMU __m512i mm512_inserti32x4(__m512i a, __m128i b, int imm) {
  auto r = lanes<uint32_t>(a);
  auto x = lanes<uint32_t>(b);
  for (int i = 0; i < 4; ++i) r.v[4 * (imm & 3) + i] = x.v[i];
  return vec<__m512i>(r);
}

// The float steps of the integer value sums' block weights (attention_int_simd.inc).
KVLM_EMU __m512 mm512_castps256_ps512(__m256 a) {  // the upper half is undefined: zero here
  Lanes<float, 16> r{};
  std::memcpy(r.v, &a, sizeof a);
  return vec<__m512>(r);
}
KVLM_EMU __m512 mm512_insertf32x8(__m512 a, __m256 b, int half) {
  auto r = lanes<float>(a);
  std::memcpy(r.v + 8 * (half & 1), &b, sizeof b);
  return vec<__m512>(r);
}
KVLM_EMU __m512 mm512_max_ps(__m512 a, __m512 b) {  // the second operand unless the first is greater (NaN, zeros)
  return zip<float>(a, b, [](float x, float y) { return x > y ? x : y; });
}
KVLM_EMU __m512 mm512_div_ps(__m512 a, __m512 b) {
  return zip<float>(a, b, [](float x, float y) { return x / y; });
}
KVLM_EMU __m512 mm512_maskz_div_ps(__mmask16 k, __m512 a, __m512 b) {
  auto x = lanes<float>(a), y = lanes<float>(b);
  for (int i = 0; i < 16; ++i) x.v[i] = (k >> i) & 1 ? x.v[i] / y.v[i] : 0.0f;
  return vec<__m512>(x);
}
// Only the predicate the kernels use (ordered, greater or equal); any other is a build error.
template <int Pred>
KVLM_EMU __mmask16 mm512_cmp_ps_mask(__m512 a, __m512 b) {
  static_assert(Pred == _CMP_GE_OQ || Pred == _CMP_LT_OQ, "emulate this predicate first");
  auto x = lanes<float>(a), y = lanes<float>(b);
  __mmask16 k = 0;
  for (int i = 0; i < 16; ++i)  // false where either is NaN
    k |= static_cast<__mmask16>(Pred == _CMP_GE_OQ ? x.v[i] >= y.v[i] : x.v[i] < y.v[i]) << i;
  return k;
}
KVLM_EMU __m512i mm512_cvtps_epi32(__m512 a) {  // the current rounding mode; out of range or NaN: INT32_MIN
  auto x = lanes<float>(a);
  Lanes<int32_t, 16> r;
  for (int i = 0; i < 16; ++i) {
    const float v = std::nearbyint(x.v[i]);
    r.v[i] = v >= -2147483648.0f && v < 2147483648.0f ? static_cast<int32_t>(v) : INT32_MIN;
  }
  return vec<__m512i>(r);
}
// vpackssdw / vpackuswb: per 128-bit block, a's lanes then b's, saturated.
KVLM_EMU __m512i mm512_packs_epi32(__m512i a, __m512i b) {
  auto x = lanes<int32_t>(a), y = lanes<int32_t>(b);
  Lanes<int16_t, 32> r;
  auto sat = [](int32_t v) { return static_cast<int16_t>(std::clamp(v, -32768, 32767)); };
  for (int blk = 0; blk < 4; ++blk)
    for (int i = 0; i < 4; ++i) r.v[8 * blk + i] = sat(x.v[4 * blk + i]), r.v[8 * blk + 4 + i] = sat(y.v[4 * blk + i]);
  return vec<__m512i>(r);
}
KVLM_EMU __m512i mm512_packus_epi16(__m512i a, __m512i b) {
  auto x = lanes<int16_t>(a), y = lanes<int16_t>(b);
  Lanes<uint8_t, 64> r;
  auto sat = [](int16_t v) { return static_cast<uint8_t>(std::clamp<int>(v, 0, 255)); };
  for (int blk = 0; blk < 4; ++blk)
    for (int i = 0; i < 8; ++i) r.v[16 * blk + i] = sat(x.v[8 * blk + i]), r.v[16 * blk + 8 + i] = sat(y.v[8 * blk + i]);
  return vec<__m512i>(r);
}
// vshuff32x4: blocks 0-1 from a, 2-3 from b, each picked by two bits of imm.
KVLM_EMU __m512 mm512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
  auto x = lanes<float>(a), y = lanes<float>(b);
  Lanes<float, 16> r;
  for (int blk = 0; blk < 4; ++blk)
    for (int i = 0; i < 4; ++i) r.v[4 * blk + i] = (blk < 2 ? x : y).v[4 * ((imm >> (2 * blk)) & 3) + i];
  return vec<__m512>(r);
}
// vpermilps with an immediate: in every 128-bit block, lane i from lane (imm >> 2i) & 3.
KVLM_EMU __m512 mm512_permute_ps(__m512 a, int imm) {
  auto x = lanes<float>(a);
  Lanes<float, 16> r;
  for (int blk = 0; blk < 4; ++blk)
    for (int i = 0; i < 4; ++i) r.v[4 * blk + i] = x.v[4 * blk + ((imm >> (2 * i)) & 3)];
  return vec<__m512>(r);
}

// vshufps: in every 128-bit block, lanes 0-1 from a's lanes (imm >> 0, 2) & 3, lanes 2-3 from b's (imm >> 4, 6) & 3.
KVLM_EMU __m512 mm512_shuffle_ps(__m512 a, __m512 b, int imm) {
  auto x = lanes<float>(a), y = lanes<float>(b);
  Lanes<float, 16> r;
  for (int blk = 0; blk < 4; ++blk)
    for (int i = 0; i < 4; ++i) r.v[4 * blk + i] = (i < 2 ? x : y).v[4 * blk + ((imm >> (2 * i)) & 3)];
  return vec<__m512>(r);
}
// vpermt2ps: lane i from a (index bit 4 clear) or b (set), at the index's low four bits.
KVLM_EMU __m512 mm512_permutex2var_ps(__m512 a, __m512i idx, __m512 b) {
  auto x = lanes<float>(a), y = lanes<float>(b);
  auto i32 = lanes<uint32_t>(idx);
  Lanes<float, 16> r;
  for (int i = 0; i < 16; ++i) r.v[i] = (i32.v[i] & 16) ? y.v[i32.v[i] & 15] : x.v[i32.v[i] & 15];
  return vec<__m512>(r);
}
KVLM_EMU __m512 mm512_sub_ps(__m512 a, __m512 b) {
  return zip<float>(a, b, [](float x, float y) { return x - y; });
}
KVLM_EMU __m512i mm512_add_epi32(__m512i a, __m512i b) {
  return zip<uint32_t>(a, b, [](uint32_t x, uint32_t y) { return x + y; });
}
KVLM_EMU __m512 mm512_fnmadd_ps(__m512 a, __m512 b, __m512 c) {
  auto x = lanes<float>(a), y = lanes<float>(b), z = lanes<float>(c);
  for (int i = 0; i < 16; ++i) z.v[i] = std::fma(-x.v[i], y.v[i], z.v[i]);  // -(a b) + c, one rounding
  return vec<__m512>(z);
}
// vrndscaleps to integers (scale 0) with the immediate's rounding: only to nearest even is emulated.
KVLM_EMU __m512 mm512_roundscale_ps(__m512 a, int imm) {
  if ((imm & 0xF7) != _MM_FROUND_TO_NEAREST_INT) std::abort();
  auto x = lanes<float>(a);
  for (auto& v : x.v) v = std::nearbyint(v);  // the default rounding mode: to nearest even
  return vec<__m512>(x);
}
// Lanes whose mask bit is set, zero elsewhere.
KVLM_EMU __m512 mm512_maskz_mov_ps(__mmask16 k, __m512 a) {
  auto x = lanes<float>(a);
  for (int i = 0; i < 16; ++i)
    if (!((k >> i) & 1)) x.v[i] = 0.0f;
  return vec<__m512>(x);
}
// vbroadcastf32x8: the eight lanes in both halves.
KVLM_EMU __m512 mm512_broadcast_f32x8(__m256 a) {
  Lanes<float, 16> r;
  std::memcpy(r.v, &a, sizeof a);
  std::memcpy(r.v + 8, &a, sizeof a);
  return vec<__m512>(r);
}

#undef KVLM_EMU

}  // namespace kvlm::avx512_emulation

// The kernels' calls go to the emulation (some intrinsics are macros when not optimizing: undefined first).
#undef _mm512_setzero_si512
#undef _mm512_set1_epi8
#undef _mm512_set1_ps
#undef _mm512_setr_epi32
#undef _mm512_loadu_si512
#undef _mm512_loadu_ps
#undef _mm512_storeu_ps
#undef _mm512_and_si512
#undef _mm512_or_si512
#undef _mm512_sub_epi32
#undef _mm512_xor_si512
#undef _mm512_dpwssd_epi32
#undef _mm512_mullo_epi32
#undef _mm512_mul_ps
#undef _mm512_fmadd_ps
#undef _mm512_srli_epi16
#undef _mm512_slli_epi16
#undef _mm512_slli_epi32
#undef _mm512_cvtepi32_ps
#undef _mm512_maskz_cvtepi8_epi32
#undef _mm512_maskz_cvtepu16_epi32
#undef _mm512_cvtph_ps
#undef _mm512_mask_blend_epi64
#undef _mm512_permutexvar_epi32
#undef _mm512_broadcast_i64x4
#undef _mm512_extractf32x8_ps
#undef _mm512_castps512_ps256
#undef _mm512_castsi512_ps
#undef _mm512_dpbusd_epi32
#undef _mm256_dpbusd_epi32
#undef _mm512_dpbf16_ps
#undef _mm512_cvtne2ps_pbh
#undef _mm512_rol_epi32
#undef _mm512_permutex2var_epi32
#undef _mm512_permutex2var_epi16
#undef _mm512_set1_epi32
#undef _mm512_storeu_si512
#undef _mm512_setzero_ps
#undef _mm512_add_ps
#undef _mm512_zextsi128_si512
#undef _mm512_inserti32x4
#undef _mm512_castps256_ps512
#undef _mm512_insertf32x8
#undef _mm512_max_ps
#undef _mm512_div_ps
#undef _mm512_maskz_div_ps
#undef _mm512_cmp_ps_mask
#undef _mm512_cvtps_epi32
#undef _mm512_packs_epi32
#undef _mm512_packus_epi16
#undef _mm512_shuffle_f32x4
#undef _mm512_permute_ps
#undef _mm512_shuffle_ps
#undef _mm512_sub_ps
#undef _mm512_add_epi32
#undef _mm512_fnmadd_ps
#undef _mm512_roundscale_ps
#undef _mm512_maskz_mov_ps
#undef _mm512_permutex2var_ps
#undef _mm512_broadcast_f32x8
#define _mm512_setzero_si512 kvlm::avx512_emulation::mm512_setzero_si512
#define _mm512_set1_epi8 kvlm::avx512_emulation::mm512_set1_epi8
#define _mm512_set1_ps kvlm::avx512_emulation::mm512_set1_ps
#define _mm512_setr_epi32 kvlm::avx512_emulation::mm512_setr_epi32
#define _mm512_loadu_si512 kvlm::avx512_emulation::mm512_loadu_si512
#define _mm512_loadu_ps kvlm::avx512_emulation::mm512_loadu_ps
#define _mm512_storeu_ps kvlm::avx512_emulation::mm512_storeu_ps
#define _mm512_and_si512 kvlm::avx512_emulation::mm512_and_si512
#define _mm512_or_si512 kvlm::avx512_emulation::mm512_or_si512
#define _mm512_sub_epi32 kvlm::avx512_emulation::mm512_sub_epi32
#define _mm512_xor_si512 kvlm::avx512_emulation::mm512_xor_si512
#define _mm512_dpwssd_epi32 kvlm::avx512_emulation::mm512_dpwssd_epi32
#define _mm512_mullo_epi32 kvlm::avx512_emulation::mm512_mullo_epi32
#define _mm512_mul_ps kvlm::avx512_emulation::mm512_mul_ps
#define _mm512_fmadd_ps kvlm::avx512_emulation::mm512_fmadd_ps
#define _mm512_srli_epi16 kvlm::avx512_emulation::mm512_srli_epi16
#define _mm512_slli_epi16 kvlm::avx512_emulation::mm512_slli_epi16
#define _mm512_slli_epi32 kvlm::avx512_emulation::mm512_slli_epi32
#define _mm512_cvtepi32_ps kvlm::avx512_emulation::mm512_cvtepi32_ps
#define _mm512_maskz_cvtepi8_epi32 kvlm::avx512_emulation::mm512_maskz_cvtepi8_epi32
#define _mm512_maskz_cvtepu16_epi32 kvlm::avx512_emulation::mm512_maskz_cvtepu16_epi32
#define _mm512_cvtph_ps kvlm::avx512_emulation::mm512_cvtph_ps
#define _mm512_mask_blend_epi64 kvlm::avx512_emulation::mm512_mask_blend_epi64
#define _mm512_permutexvar_epi32 kvlm::avx512_emulation::mm512_permutexvar_epi32
#define _mm512_broadcast_i64x4 kvlm::avx512_emulation::mm512_broadcast_i64x4
#define _mm512_extractf32x8_ps kvlm::avx512_emulation::mm512_extractf32x8_ps
#define _mm512_castps512_ps256 kvlm::avx512_emulation::mm512_castps512_ps256
#define _mm512_castsi512_ps kvlm::avx512_emulation::mm512_castsi512_ps
#define _mm512_dpbusd_epi32 kvlm::avx512_emulation::mm512_dpbusd_epi32
#define _mm256_dpbusd_epi32 kvlm::avx512_emulation::mm256_dpbusd_epi32
#define _mm512_dpbf16_ps kvlm::avx512_emulation::mm512_dpbf16_ps
#define _mm512_cvtne2ps_pbh kvlm::avx512_emulation::mm512_cvtne2ps_pbh
#define _mm512_rol_epi32 kvlm::avx512_emulation::mm512_rol_epi32
#define _mm512_permutex2var_epi32 kvlm::avx512_emulation::mm512_permutex2var_epi32
#define _mm512_permutex2var_epi16 kvlm::avx512_emulation::mm512_permutex2var_epi16
#define _mm512_set1_epi32 kvlm::avx512_emulation::mm512_set1_epi32
#define _mm512_storeu_si512 kvlm::avx512_emulation::mm512_storeu_si512
#define _mm512_setzero_ps kvlm::avx512_emulation::mm512_setzero_ps
#define _mm512_add_ps kvlm::avx512_emulation::mm512_add_ps
#define _mm512_zextsi128_si512 kvlm::avx512_emulation::mm512_zextsi128_si512
#define _mm512_inserti32x4 kvlm::avx512_emulation::mm512_inserti32x4
#define _mm512_castps256_ps512 kvlm::avx512_emulation::mm512_castps256_ps512
#define _mm512_insertf32x8 kvlm::avx512_emulation::mm512_insertf32x8
#define _mm512_max_ps kvlm::avx512_emulation::mm512_max_ps
#define _mm512_div_ps kvlm::avx512_emulation::mm512_div_ps
#define _mm512_maskz_div_ps kvlm::avx512_emulation::mm512_maskz_div_ps
#define _mm512_cvtps_epi32 kvlm::avx512_emulation::mm512_cvtps_epi32
#define _mm512_packs_epi32 kvlm::avx512_emulation::mm512_packs_epi32
#define _mm512_packus_epi16 kvlm::avx512_emulation::mm512_packus_epi16
#define _mm512_shuffle_f32x4 kvlm::avx512_emulation::mm512_shuffle_f32x4
#define _mm512_permute_ps kvlm::avx512_emulation::mm512_permute_ps
#define _mm512_shuffle_ps kvlm::avx512_emulation::mm512_shuffle_ps
#define _mm512_sub_ps kvlm::avx512_emulation::mm512_sub_ps
#define _mm512_add_epi32 kvlm::avx512_emulation::mm512_add_epi32
#define _mm512_fnmadd_ps kvlm::avx512_emulation::mm512_fnmadd_ps
#define _mm512_roundscale_ps kvlm::avx512_emulation::mm512_roundscale_ps
#define _mm512_maskz_mov_ps kvlm::avx512_emulation::mm512_maskz_mov_ps
#define _mm512_permutex2var_ps kvlm::avx512_emulation::mm512_permutex2var_ps
#define _mm512_broadcast_f32x8 kvlm::avx512_emulation::mm512_broadcast_f32x8
#define _mm512_cmp_ps_mask(a, b, pred) kvlm::avx512_emulation::mm512_cmp_ps_mask<pred>(a, b)
