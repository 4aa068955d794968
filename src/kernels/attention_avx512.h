// AVX-512 value sums of a GQA group, which attention.cpp calls where the CPU has AVX-512: 16 / C
// heads of C zmm each (four heads of 64, two of 128) share each value row's loads (and, for
// encoded rows, its widening), so a group reads its rows once per four or two heads. Per element
// it is the same fused multiply-add in the same key order as the AVX2 tiles, on the same widened
// values: bit-identical results.
#pragma once
#include <cstddef>

#include "kernels/attention.h"

namespace kvlm::avx512 {

// Heads [0, returned) of st summed over f32 rows v (`stride` floats apart); the caller sums the
// rest. 0 where the CPU lacks AVX-512 or the head size is not 64 or 128.
int accumulate_f32_heads(AttnState& st, const float* p, size_t p_stride, const float* v, size_t stride, int n);

// Every head of st summed over f16, bf16 or int8 rows; false where they do not fit (no AVX-512,
// another type, a head size other than 64 or 128, or a group that is not whole fours or twos).
bool accumulate_encoded(AttnState& st, const float* p, size_t p_stride, const EncodedRows& v, int n);

// Scores of keys [0, returned) (whole eights) for groups of 4+ heads, head sizes of 8s: as
// attention.cpp's scores_keys8, the same multiply-adds in the same lanes and the same tree of
// sums, bit for bit, two keys to a zmm (one in each half), so each query load and each reduction
// serves two keys; groups that are not whole eights go four heads at a time (up to head size
// 256). 0 where the CPU lacks AVX-512 or the shape is not covered (the caller then runs its AVX2
// blocks). Rows: the readers of attention_rows.h.
template <class Rows>
int scores_key_pairs(const float* q, int g, int hd, float scale, const Rows& k, int n, float* s, size_t s_stride);

// The softmax's exp(s[j] - mx) in place for keys [0, returned) (whole 32s), 16 lanes at a time,
// with the sum of each eight keys added in key order to the eight lanes sum8: attention.cpp's
// AVX2 loop bit for bit (the same exponential lane by lane, the same sums). 0 without AVX-512.
int exp_minus_blocks(float* s, int n, float mx, float* sum8);

// The largest of s[0, returned) (whole 16s) and mx: four chains of 16 lanes (one chain of 8
// lanes waited on each max's latency: 3-5% of an int8 decode step in L3, perf). The max is
// exact in any order. 0 (and mx unchanged) without AVX-512.
int max_blocks(const float* s, int n, float& mx);

}  // namespace kvlm::avx512
