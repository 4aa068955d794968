#include "kernels/linear.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/dot.h"
#include "kernels/ops.h"

namespace kvlm {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Q8_0: return "q8_0";
    case WeightFormat::Q4_0: return "q4_0";
  }
  return "?";
}

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "f32") return WeightFormat::F32;
  if (s == "bf16") return WeightFormat::BF16;
  if (s == "q8_0") return WeightFormat::Q8_0;
  if (s == "q4_0") return WeightFormat::Q4_0;
  fail("unknown weight type '", s, "' (known: f32, bf16, q8_0, q4_0)");
}

void quantize_row_q8_0(const float* x, int n, float* scales, int8_t* q) {
  for (int b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int i = 0; i < 32; ++i) q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
  }
}

void quantize_row_q4_0(const float* x, int n, float* scales, uint8_t* q) {
  for (int b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f, max = 0.0f;  // the signed value of largest magnitude maps to -8
    for (int i = 0; i < 32; ++i)
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int i = 0; i < 16; ++i) {
      int lo = std::min(15, static_cast<int>(xb[i] * id + 8.5f));
      int hi = std::min(15, static_cast<int>(xb[i + 16] * id + 8.5f));
      q[b * 16 + i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

namespace scalar {
float dot_q8_0(const float* ws, const int8_t* wq, const float* xs, const int8_t* xq, int nb) {
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    int acc = 0;
    for (int i = 0; i < 32; ++i) acc += wq[b * 32 + i] * xq[b * 32 + i];
    s += ws[b] * xs[b] * static_cast<float>(acc);
  }
  return s;
}
float dot_q4_0(const float* ws, const uint8_t* wq, const float* xs, const int8_t* xq, int nb) {
  float s = 0.0f;
  for (int b = 0; b < nb; ++b) {
    int acc = 0;
    for (int i = 0; i < 16; ++i) {
      acc += ((wq[b * 16 + i] & 0xF) - 8) * xq[b * 32 + i];
      acc += ((wq[b * 16 + i] >> 4) - 8) * xq[b * 32 + 16 + i];
    }
    s += ws[b] * xs[b] * static_cast<float>(acc);
  }
  return s;
}
float dot_bf16(const uint16_t* w, const float* x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += bf16_to_f32(w[i]) * x[i];
  return s;
}
}  // namespace scalar

namespace {

__attribute__((target("avx2,fma"))) inline __m256 hsum_i8_block(__m256i w, __m256i x) {
  // |w| * (x * sign(w)) in u8 x s8 pairs, then pairs of int16 -> int32 (no overflow: 2*127*127).
  __m256i dot16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot16, _mm256_set1_epi16(1)));
}

__attribute__((target("avx2,fma"))) inline float reduce(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) float dot_q8_0_avx2(const float* ws, const int8_t* wq, const float* xs,
                                                        const int8_t* xq, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + b * 32));
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(ws[b] * xs[b]), hsum_i8_block(w, x), acc);
  }
  return reduce(acc);
}

__attribute__((target("avx2,fma"))) float dot_q4_0_avx2(const float* ws, const uint8_t* wq, const float* xs,
                                                        const int8_t* xq, int nb) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
  for (int b = 0; b < nb; ++b) {
    __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + b * 16));
    // low nibbles -> values 0..15, high nibbles -> values 16..31
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    __m256i w = _mm256_sub_epi8(_mm256_and_si256(both, low), eight);
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * 32));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(ws[b] * xs[b]), hsum_i8_block(w, x), acc);
  }
  return reduce(acc);
}

__attribute__((target("avx2,fma"))) float dot_bf16_avx2(const uint16_t* w, const float* x, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)), _mm256_loadu_ps(x + i + 8), acc1);
  }
  float s = reduce(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += bf16_to_f32(w[i]) * x[i];
  return s;
}

// One weight row against four activation rows: each weight block is loaded (and for Q4_0
// unpacked) once for four tokens. This is the prefill path.
template <bool kQ4>
__attribute__((target("avx2,fma"))) void dot4_avx2(const float* ws, const uint8_t* wq, const float* xs, const int8_t* xq,
                                                   size_t xs_stride, size_t xq_stride, int nb, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256i low = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi16(1);
  for (int b = 0; b < nb; ++b) {
    __m256i w;
    if constexpr (kQ4) {
      __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + b * 16));
      w = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low), eight);
    } else {
      w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + b * 32));
    }
    const __m256i aw = _mm256_sign_epi8(w, w);
    for (int t = 0; t < 4; ++t) {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * xq_stride + b * 32));
      __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(ws[b] * xs[t * xs_stride + b]), _mm256_cvtepi32_ps(d), acc[t]);
    }
  }
  for (int t = 0; t < 4; ++t) out[t] = reduce(acc[t]);
}

constexpr size_t kMinParallelWork = 1 << 16;

}  // namespace

float dot_q8_0(const float* ws, const int8_t* wq, const float* xs, const int8_t* xq, int nb) {
  return cpu_has_avx2() ? dot_q8_0_avx2(ws, wq, xs, xq, nb) : scalar::dot_q8_0(ws, wq, xs, xq, nb);
}
float dot_q4_0(const float* ws, const uint8_t* wq, const float* xs, const int8_t* xq, int nb) {
  return cpu_has_avx2() ? dot_q4_0_avx2(ws, wq, xs, xq, nb) : scalar::dot_q4_0(ws, wq, xs, xq, nb);
}
float dot_bf16(const uint16_t* w, const float* x, int n) {
  return cpu_has_avx2() ? dot_bf16_avx2(w, x, n) : scalar::dot_bf16(w, x, n);
}

bool Linear::convert(WeightFormat f) {
  if (f == fmt) return true;
  if (fmt != WeightFormat::F32) fail("internal error: Linear can only be converted from f32");
  if ((f == WeightFormat::Q8_0 || f == WeightFormat::Q4_0) && in % 32 != 0) return false;
  const size_t n = static_cast<size_t>(out) * in;
  if (f == WeightFormat::BF16) {
    w16.resize(n);
    for (size_t i = 0; i < n; ++i) w16[i] = f32_to_bf16(w[i]);
  } else {
    const int nb = in / 32;
    scales.resize(static_cast<size_t>(out) * nb);
    quants.resize(f == WeightFormat::Q8_0 ? n : n / 2);
    for (int r = 0; r < out; ++r) {
      if (f == WeightFormat::Q8_0)
        quantize_row_q8_0(w.data() + static_cast<size_t>(r) * in, in, scales.data() + static_cast<size_t>(r) * nb,
                          reinterpret_cast<int8_t*>(quants.data()) + static_cast<size_t>(r) * in);
      else
        quantize_row_q4_0(w.data() + static_cast<size_t>(r) * in, in, scales.data() + static_cast<size_t>(r) * nb,
                          quants.data() + static_cast<size_t>(r) * in / 2);
    }
  }
  fmt = f;
  std::vector<float>().swap(w);
  return true;
}

size_t Linear::bytes() const {
  return (w.size() + b.size() + scales.size()) * sizeof(float) + w16.size() * 2 + quants.size();
}

void Linear::forward(const float* x, int n, float* y) const {
  const float* B = b.empty() ? nullptr : b.data();
  if (fmt == WeightFormat::F32) {
    matmul(w.data(), B, out, in, x, n, y);
    return;
  }
  const int nb = in / 32;
  std::vector<float> xs;
  std::vector<int8_t> xq;
  if (fmt != WeightFormat::BF16) {  // activations to Q8_0, once per call
    xs.resize(static_cast<size_t>(n) * nb);
    xq.resize(static_cast<size_t>(n) * in);
    for (int t = 0; t < n; ++t)
      quantize_row_q8_0(x + static_cast<size_t>(t) * in, in, xs.data() + static_cast<size_t>(t) * nb,
                        xq.data() + static_cast<size_t>(t) * in);
  }
  const bool quad = cpu_has_avx2() && (fmt == WeightFormat::Q8_0 || fmt == WeightFormat::Q4_0);
  auto body = [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      float bias = B ? B[r] : 0.0f;
      int t = 0;
      for (; quad && t + 4 <= n; t += 4) {
        float v[4];
        const float* xst = xs.data() + static_cast<size_t>(t) * nb;
        const int8_t* xqt = xq.data() + static_cast<size_t>(t) * in;
        if (fmt == WeightFormat::Q8_0)
          dot4_avx2<false>(scales.data() + r * nb, quants.data() + r * in, xst, xqt, nb, in, nb, v);
        else
          dot4_avx2<true>(scales.data() + r * nb, quants.data() + r * in / 2, xst, xqt, nb, in, nb, v);
        for (int k = 0; k < 4; ++k) y[static_cast<size_t>(t + k) * out + r] = v[k] + bias;
      }
      for (; t < n; ++t) {
        float v;
        if (fmt == WeightFormat::BF16)
          v = dot_bf16(w16.data() + r * in, x + static_cast<size_t>(t) * in, in);
        else if (fmt == WeightFormat::Q8_0)
          v = dot_q8_0(scales.data() + r * nb, reinterpret_cast<const int8_t*>(quants.data()) + r * in,
                       xs.data() + static_cast<size_t>(t) * nb, xq.data() + static_cast<size_t>(t) * in, nb);
        else
          v = dot_q4_0(scales.data() + r * nb, quants.data() + r * in / 2, xs.data() + static_cast<size_t>(t) * nb,
                       xq.data() + static_cast<size_t>(t) * in, nb);
        y[static_cast<size_t>(t) * out + r] = v + bias;
      }
    }
  };
  if (static_cast<size_t>(out) * in * n < kMinParallelWork)
    body(0, out);
  else
    ThreadPool::global().parallel_for(out, body);
}

}  // namespace kvlm
