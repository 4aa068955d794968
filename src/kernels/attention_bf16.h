// Attention against bf16 rows with AVX-512 BF16's dot products (vdpbf16ps: each f32 lane adds
// two bf16 products, twice the multiply-adds of an f32 FMA per instruction). A long-context step
// over bf16 rows was bound by its f32 multiply-adds (docs/benchmarks.md, section 27), not by
// memory. The instruction multiplies bf16 by bf16, so the query and the softmax weights are
// rounded to bf16 first (round to nearest even, denormals to zero, as the instruction does);
// bench/query_quant_kld.py measures what that costs. Every path adds the same exact products in
// the same order, so the SIMD kernels are bit-identical to the scalar twins:
//   score = scale * (... fma(k[1], q[1], fma(k[0], q[0]... )): per pair of elements 2d, 2d+1
//           (d from 0), acc = fma(k[2d+1], q[2d+1], acc), then acc = fma(k[2d], q[2d], acc)
//   value sums: acc = fma(bf16(p_j), v_j, acc), key by key in order
// with every fma's result flushed to zero where it is denormal (the instruction's FTZ).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"

namespace kvlm {

// Whether the AVX-512 BF16 kernels below run for these rows on this thread (else their scalar
// twins do): bf16 rows with head sizes of 32s up to 256, at the AVX-512 row on a CPU with avx512_bf16.
bool bf16_products_vectorized(const KvRowCodec& c);
// Whether attention reads bf16 rows with these kernels for groups of `group` query heads: where
// they are vectorized, for groups of 4+ heads (a key's transposed pairs serve every head of the
// group), on CPUs that are not Intel's. An Intel core issues vdpbf16ps on one port where it issues
// f32 FMAs on two, so widening the rows to f32 was faster there (Xeon with AMX: TinyLlama-shaped
// decode attention at 16K 34 ms against 37) and keeps the query unrounded.
bool bf16_products(const KvRowCodec& c, int group);

// x rounded to bf16 as the kernels round the query and the weights.
uint16_t round_bf16(float x);
// The g heads of a query rounded for scores_bf16 (g * hd values).
void round_query_bf16(const float* q, int n, uint16_t* out);

// s[i * s_stride + j] for the g heads (qb: their rounded query) and the n bf16 keys of head k.h.
void attn_scores_bf16(const uint16_t* qb, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                      size_t s_stride);
// Adds keys [0, n) of the bf16 rows of head v.h, weighted by bf16(p[i * p_stride + j]), to st.acc.
void attn_accumulate_bf16(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n);

namespace scalar {
void attn_scores_bf16(const uint16_t* qb, int g, int hd, float scale, const EncodedRows& k, int n, float* s,
                      size_t s_stride);
void attn_accumulate_bf16(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n);
}  // namespace scalar

}  // namespace kvlm
