// Attention with an online softmax, a logical span of keys at a time: scores for the span
// (possibly gathered from several memory runs: paged blocks, ring segments, the new chunk),
// one rescale of the running state, then the weighted values. The span boundaries depend on
// positions only, never on memory layout, so every cache layout gives bit-identical results.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/kv_quant.h"

namespace kvlm {

// Running softmax state of g query heads sharing a KV head: max m[g], denominator l[g],
// numerator acc[g][hd].
struct AttnState {
  int g, hd;
  float* m;
  float* l;
  float* acc;
  void reset();
};

// s[i * s_stride + j] = scale * q[i] . k[j] for the g heads and n keys (rows `stride` apart).
void attn_scores(const float* q, int g, int hd, float scale, const float* k, size_t stride, int n, float* s,
                 size_t s_stride);
// Folds a span's scores s[g][n] into the state; s becomes the unnormalized weights.
void attn_update(AttnState& st, float* s, size_t s_stride, int n);
// acc[i] += sum_j p[i][j] * v[j] for n values (rows `stride` apart).
void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n);
// Head h of n rows encoded by a codec (f16, bf16, int8, int4), as KV pages store them: data and params
// at the run's first row, rows codec->data_bytes() and codec->n_params() apart.
struct EncodedRows {
  const KvRowCodec* codec;
  const uint8_t* data;
  const float* params;
  int h;
};
// attn_scores and attn_accumulate on encoded rows, widened in registers: bit-identical to
// decoding them (KvRowCodec::decode_rows) and calling the f32 kernels. False where there is no
// such path (no SIMD, or a head size it does not cover): the caller decodes.
bool attn_scores_encoded(const float* q, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                         size_t s_stride);
bool attn_accumulate_encoded(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n);

// out[i] = acc[i] / l[i], rows out_stride apart.
void attn_finish(const AttnState& st, float* out, size_t out_stride, const float* sinks = nullptr);

namespace scalar {
void attn_scores(const float* q, int g, int hd, float scale, const float* k, size_t stride, int n, float* s,
                 size_t s_stride);
void attn_accumulate(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n);
}  // namespace scalar

}  // namespace kvlm
