#include "kernels/attention_avx512.h"

#include "core/cpu.h"
#include "kernels/prefetch.h"

#if KVLM_X86
#include "kernels/avx512_intrinsics.h"
#endif

namespace kvlm::avx512 {

#if KVLM_X86
namespace {

// As attention.cpp's AVX2 readers: rows 8 keys ahead are asked for.
constexpr int kAhead = 8;

#define KVLM_AVX512 __attribute__((target(KVLM_AVX512_TARGET)))
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through their masked builtins, which
// -Wmaybe-uninitialized reports once inlined; nothing is read uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
struct F32Rows16 {
  const float* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const { return _mm512_loadu_ps(p + j * stride + d); }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * sizeof(float)); }
};
struct Bf16Rows16 {
  const uint16_t* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * stride + d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * 2); }
};
struct F16Rows16 {
  const uint16_t* p;
  size_t stride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * stride + d)));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd * 2); }
};
struct Int8Rows16 {
  const int8_t* p;
  size_t stride;
  const float* scale;
  size_t pstride;
  KVLM_AVX512 __m512 load16(int j, int d) const {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j * stride + d));
    return _mm512_mul_ps(_mm512_set1_ps(scale[j * pstride]), _mm512_cvtepi32_ps(_mm512_maskz_cvtepi8_epi32(0xFFFF, q)));
  }
  void prefetch(int j, int hd) const { prefetch_bytes(p + j * stride, hd); }
};

template <int C, class Rows>
KVLM_AVX512 void accumulate_heads_avx512(float* acc, const float* p, size_t p_stride, const Rows& v, int n) {
  constexpr int H = 16 / C;
  __m512 a[H][C];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) a[h][c] = _mm512_loadu_ps(acc + h * 16 * C + 16 * c);
  for (int j = 0; j < n; ++j) {
    v.prefetch(j + kAhead, 16 * C);
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = v.load16(j, 16 * c);
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * p_stride + j]);
      for (int c = 0; c < C; ++c) a[h][c] = _mm512_fmadd_ps(w, vv[c], a[h][c]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + h * 16 * C + 16 * c, a[h][c]);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Heads [0, returned) of the state by accumulate_heads_avx512 (none where it does not apply).
template <class Rows>
int heads_by_rows(AttnState& st, const float* p, size_t p_stride, const Rows& v, int n) {
  if (!isa_at_least(Isa::Avx512) || (st.hd != 64 && st.hd != 128)) return 0;
  const int C = st.hd / 16, H = 16 / C;
  int first = 0;
  for (; first + H <= st.g; first += H) {
    float* acc = st.acc + static_cast<size_t>(first) * st.hd;
    if (C == 4) accumulate_heads_avx512<4>(acc, p + first * p_stride, p_stride, v, n);
    else accumulate_heads_avx512<8>(acc, p + first * p_stride, p_stride, v, n);
  }
  return first;
}

}  // namespace

int accumulate_f32_heads(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n) {
  return heads_by_rows(st, p, p_stride, F32Rows16{v, stride}, n);
}

bool accumulate_encoded(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n) {
  const KvRowCodec& c = *v.codec;
  const int hd = c.head_dim, H = hd == 64 ? 4 : 2;
  if (!isa_at_least(Isa::Avx512) || (hd != 64 && hd != 128) || st.g % H != 0) return false;
  const size_t db = c.data_bytes();
  switch (c.dtype) {
    case DType::F16:
      heads_by_rows(st, p, p_stride, F16Rows16{reinterpret_cast<const uint16_t*>(v.data) + static_cast<size_t>(v.h) * hd, db / 2}, n);
      return true;
    case DType::BF16:
      heads_by_rows(st, p, p_stride, Bf16Rows16{reinterpret_cast<const uint16_t*>(v.data) + static_cast<size_t>(v.h) * hd, db / 2}, n);
      return true;
    case DType::Int8:
      heads_by_rows(st, p, p_stride,
                    Int8Rows16{reinterpret_cast<const int8_t*>(v.data) + static_cast<size_t>(v.h) * hd, db, v.params + v.h,
                               static_cast<size_t>(c.n_params())},
                    n);
      return true;
    default: return false;
  }
}
#else
int accumulate_f32_heads(AttnState&, const float*, size_t, const float*, size_t, int) { return 0; }
bool accumulate_encoded(AttnState&, const float*, size_t, const EncodedRows&, int) { return false; }
#endif

}  // namespace kvlm::avx512
