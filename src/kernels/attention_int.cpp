#include "kernels/attention_int.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/attention_amx.h"
#include "kernels/quantize.h"

#if KVLM_X86
#include "kernels/avx512_intrinsics.h"
#endif

namespace kvlm {

bool integer_scores(const KvRowCodec& c, int group) {
  return (c.dtype == DType::Int8 || c.dtype == DType::Int4) && c.head_dim % 32 == 0 && c.head_dim <= 256 && group >= 4;
}

bool integer_values(const KvRowCodec& c, int group) { return integer_scores(c, group); }

void QuantQuery::prepare(DType t, const float* q, int g_, int hd_, float scale) {
  dtype = t, g = g_, hd = hd_;
  const int padded = (g + 15) / 16 * 16;  // the SIMD kernels take heads 8 or 16 at a time; the rest are zero
  codes.assign(static_cast<size_t>(padded) * hd, 0);
  qs.assign(padded, 0.0f);
  sums.assign(static_cast<size_t>(padded) * groups(), 0);
  std::vector<int8_t> row(hd);
  for (int i = 0; i < g; ++i) {
    float sq;
    quantize_symmetric_i8(q + static_cast<size_t>(i) * hd, hd, hd, &sq, row.data());  // codes in [-127, 127]
    qs[i] = sq * scale;
    int8_t* out = codes.data() + static_cast<size_t>(i) * hd;
    for (int gr = 0; gr < groups(); ++gr) {
      const int w = dtype == DType::Int4 ? 32 : hd, at = gr * w;
      int32_t sum = 0;
      for (int x = 0; x < w; ++x) sum += row[at + x];
      sums[static_cast<size_t>(i) * groups() + gr] = sum;
      if (dtype == DType::Int4)  // the keys' bytes hold elements 2x (low nibble) and 2x+1 (high)
        for (int x = 0; x < 16; ++x) out[at + x] = row[at + 2 * x], out[at + 16 + x] = row[at + 2 * x + 1];
      else
        std::memcpy(out, row.data(), hd);
    }
  }
  if (amx_scores(t, hd, g))
    amx::query_tiles(codes.data(), g, hd, tiles);
  else
    tiles.clear();
}

namespace {

// The float operations after the integer sums, shared by every ISA (lanes or one head at a time).
inline float int8_score(int32_t dot, float sk, float qs) { return static_cast<float>(dot) * sk * qs; }
inline float int4_term(int32_t dot, float s, float z, int32_t qsum) {
  return std::fma(s, static_cast<float>(dot), z * static_cast<float>(qsum));
}

// A block's weights for one head: u[0..32) (zero past n) and the returned scale.
inline float block_weights(const float* p, const float* sv, int n, uint8_t* u) {
  float wmax = 0.0f;
  for (int x = 0; x < n; ++x) wmax = std::max(wmax, p[x] * sv[x]);
  const float ws = wmax / 127.0f, inv = ws >= FLT_MIN ? 1.0f / ws : 0.0f;  // a negligible block: all zero
  for (int x = 0; x < kValueBlock; ++x) u[x] = x < n ? static_cast<uint8_t>(std::min(127.0f, std::nearbyint(p[x] * sv[x] * inv))) : 0;
  return ws;
}

// Parameter `at` of a block's keys (int8: 0, the scale; int4 group gr: 2 gr its scale, 2 gr + 1
// its zero point), into one array.
inline void param_column(const float* const* prm, int at, int n, float* out) {
  for (int x = 0; x < n; ++x) out[x] = prm[x][at];
}
// The zero points' share of one head: eight running sums (key x into sum x % 8, as the SIMD twin's
// lanes; one chain of 32 dependent multiply-adds was most of an int4 step), added pairwise.
inline float zero_share(const float* p, const float* z, int n) {
  float t[8] = {};
  for (int x = 0; x < n; ++x) t[x % 8] = std::fma(p[x], z[x], t[x % 8]);
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

}  // namespace

namespace scalar {
namespace {
void values_int8(AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows, const float* const* prm, int n) {
  const int hd = st.hd;
  uint8_t u[kValueBlock];
  float sv[kValueBlock];
  std::vector<int32_t> sums(hd);
  for (int j0 = 0; j0 < n; j0 += kValueBlock) {
    const int nb = std::min(kValueBlock, n - j0);
    param_column(prm + j0, 0, nb, sv);
    for (int i = 0; i < st.g; ++i) {
      const float ws = block_weights(p + i * p_stride + j0, sv, nb, u);
      std::fill(sums.begin(), sums.end(), 0);
      for (int j = 0; j < nb; ++j)
        for (int d = 0; d < hd; ++d) sums[d] += u[j] * static_cast<int8_t>(rows[j0 + j][d]);
      float* acc = st.acc + static_cast<size_t>(i) * hd;
      for (int d = 0; d < hd; ++d) acc[d] = std::fma(ws, static_cast<float>(sums[d]), acc[d]);
    }
  }
}

void values_int4(AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows, const float* const* prm, int n) {
  const int hd = st.hd, G = hd / 32;
  uint8_t u[kValueBlock];
  float s[kValueBlock], z[kValueBlock];
  for (int j0 = 0; j0 < n; j0 += kValueBlock) {
    const int nb = std::min(kValueBlock, n - j0);
    for (int gr = 0; gr < G; ++gr) {
      param_column(prm + j0, 2 * gr, nb, s), param_column(prm + j0, 2 * gr + 1, nb, z);
      for (int i = 0; i < st.g; ++i) {
        const float* pi = p + i * p_stride + j0;
        const float ws = block_weights(pi, s, nb, u), zs = zero_share(pi, z, nb);
        float* acc = st.acc + static_cast<size_t>(i) * hd + gr * 32;
        for (int e = 0; e < 32; ++e) {  // byte e / 2 holds elements 2b (low nibble) and 2b + 1
          int32_t sum = 0;
          for (int j = 0; j < nb; ++j) sum += u[j] * ((rows[j0 + j][gr * 16 + e / 2] >> (4 * (e % 2))) & 0xF);
          acc[e] = std::fma(ws, static_cast<float>(sum), acc[e]) + zs;
        }
      }
    }
  }
}
}  // namespace

void attn_accumulate_quantized(DType t, AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows,
                               const float* const* prm, int n) {
  return t == DType::Int8 ? values_int8(st, p, p_stride, rows, prm, n) : values_int4(st, p, p_stride, rows, prm, n);
}

void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride) {
  const KvRowCodec& c = *k.codec;
  const int hd = q.hd, G = q.groups();
  const size_t db = c.data_bytes(), pn = static_cast<size_t>(c.n_params());
  for (int j = 0; j < n; ++j) {
    const uint8_t* row = k.data + j * db;
    const float* prm = k.params + j * pn;
    for (int i = 0; i < q.g; ++i) {
      const int8_t* qi = q.codes.data() + static_cast<size_t>(i) * hd;
      if (q.dtype == DType::Int8) {
        const int8_t* kk = reinterpret_cast<const int8_t*>(row) + static_cast<size_t>(k.h) * hd;
        int32_t dot = 0;
        for (int d = 0; d < hd; ++d) dot += qi[d] * kk[d];
        s[i * s_stride + j] = int8_score(dot, prm[k.h], q.qs[i]);
        continue;
      }
      float acc = 0.0f;
      for (int gr = 0; gr < G; ++gr) {
        const int kg = k.h * G + gr;  // the group's index in the row
        const uint8_t* b = row + kg * 16;
        const int8_t* qg = qi + gr * 32;
        int32_t dot = 0;
        for (int x = 0; x < 16; ++x) dot += qg[x] * (b[x] & 0xF) + qg[16 + x] * (b[x] >> 4);
        const float t = int4_term(dot, prm[2 * kg], prm[2 * kg + 1], q.sums[static_cast<size_t>(i) * G + gr]);
        acc = gr == 0 ? t : acc + t;
      }
      s[i * s_stride + j] = acc * q.qs[i];
    }
  }
}
}  // namespace scalar

#if KVLM_X86
// One body, two targets (as qgemm.cpp): GCC takes a target pragma, clang an attribute pragma.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
#define KVLM_ATTN_VNNI 0
#include "kernels/attention_int_simd.inc"
#undef KVLM_ATTN_VNNI
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
KVLM_PRAGMA(clang attribute push(__attribute__((target(KVLM_AVX512_TARGET))), apply_to = function))
#else
#pragma GCC pop_options
#pragma GCC push_options
KVLM_PRAGMA(GCC target(KVLM_AVX512_TARGET))
#endif
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through their masked builtins, which
// -Wmaybe-uninitialized reports once inlined; nothing is read uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace avx512 {
#define KVLM_ATTN_VNNI 1
#include "kernels/attention_int_simd.inc"
#undef KVLM_ATTN_VNNI
}  // namespace avx512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif  // KVLM_X86

void attn_accumulate_quantized(DType t, AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows,
                               const float* const* prm, int n) {
  KVLM_CHECK((t == DType::Int8 || t == DType::Int4) && st.hd % 32 == 0 && st.hd <= 256,
             "integer value sums take int8 or int4 rows with head sizes of 32s up to 256");
#if KVLM_X86
  if (amx_values(t, st.hd, st.g)) return amx::values_int8(&st, 1, p, p_stride, 0, rows, 0, prm, 0, n);
  if (isa_at_least(Isa::Avx512)) {
    return t == DType::Int8 ? avx512::values_int8(st, p, p_stride, rows, prm, n) : avx512::values_int4(st, p, p_stride, rows, prm, n);
  }
  if (isa_at_least(Isa::Avx2)) {
    return t == DType::Int8 ? avx2::values_int8(st, p, p_stride, rows, prm, n) : avx2::values_int4(st, p, p_stride, rows, prm, n);
  }
#endif
  scalar::attn_accumulate_quantized(t, st, p, p_stride, rows, prm, n);
}

void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride) {
  KVLM_CHECK(q.dtype == k.codec->dtype && q.hd == k.codec->head_dim && integer_scores(*k.codec, q.g),
             "the query was not prepared for these keys");
#if KVLM_X86
  if (!q.tiles.empty() && amx_scores(q.dtype, q.hd, q.g)) return attn_scores_quantized_heads(&q, 1, k, n, s, s_stride, 0);
  if (isa_at_least(Isa::Avx512)) {
    return q.dtype == DType::Int8 ? avx512::scores_int8(q, k, n, s, s_stride) : avx512::scores_int4(q, k, n, s, s_stride);
  }
  if (isa_at_least(Isa::Avx2)) {
    return q.dtype == DType::Int8 ? avx2::scores_int8(q, k, n, s, s_stride)
                                  : avx2::scores_int4(q, k, n, s, s_stride);
  }
#endif
  scalar::attn_scores_quantized(q, k, n, s, s_stride);
}

void attn_scores_quantized_heads(const QuantQuery* qq, int heads, const EncodedRows& k, int n, float* s, size_t s_stride,
                                 size_t s_head) {
#if KVLM_X86
  if (heads > 0 && !qq[0].tiles.empty() && amx_scores(qq[0].dtype, qq[0].hd, qq[0].g)) {
    KVLM_CHECK(qq[0].dtype == k.codec->dtype && qq[0].hd == k.codec->head_dim && k.h + heads <= k.codec->kv_dim / k.codec->head_dim,
               "the queries were not prepared for these keys");
    // 16 keys at a time on the tiles; the rest on the AVX-512 kernels, a head at a time.
    const int done = amx::scores_int8(qq, heads, k, n, s, s_stride, s_head);
    if (done == n) return;
    const size_t db = k.codec->data_bytes(), pn = static_cast<size_t>(k.codec->n_params());
    for (int x = 0; x < heads; ++x)
      avx512::scores_int8(qq[x], EncodedRows{k.codec, k.data + done * db, k.params + done * pn, k.h + x}, n - done,
                          s + x * s_head + done, s_stride);
    return;
  }
#endif
  for (int x = 0; x < heads; ++x)
    attn_scores_quantized(qq[x], EncodedRows{k.codec, k.data, k.params, k.h + x}, n, s + x * s_head, s_stride);
}

void attn_accumulate_quantized_heads(DType t, AttnState* st, int heads, const float* p, size_t p_stride, size_t p_head,
                                     const uint8_t* const* rows, size_t row_step, const float* const* prm,
                                     size_t prm_step, int n) {
  if (heads <= 0) return;
  if (amx_values(t, st[0].hd, st[0].g))
    return amx::values_int8(st, heads, p, p_stride, p_head, rows, row_step, prm, prm_step, n);
  std::vector<const uint8_t*> r(n);  // head x's rows and parameters
  std::vector<const float*> q(n);
  for (int x = 0; x < heads; ++x) {
    for (int j = 0; j < n; ++j) r[j] = rows[j] + x * row_step, q[j] = prm[j] + x * prm_step;
    attn_accumulate_quantized(t, st[x], p + x * p_head, p_stride, r.data(), q.data(), n);
  }
}

}  // namespace kvlm
