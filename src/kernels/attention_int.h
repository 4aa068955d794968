// Scores against int8 and int4 keys in integers: the query is quantized once per step to int8
// (a scale per head, as llama.cpp quantizes its query to the keys' q8_0 type), and each key's
// dot product is an exact integer sum (vpdpbusd with AVX-512 VNNI, pmaddubsw with AVX2), scaled
// afterwards. A long-context step was spent in the f32 multiply-adds of the scores; the integer
// dot does 4x the products per instruction. Every ISA computes the same integers and the same
// float operations after them, so the SIMD paths are bit-identical to the scalar twin.
//
//   int8 key (codes k, scale sk):            score = (float(sum q*k) * sk) * qs
//   int4 key (groups of 32: n, scale s, zero z):  score = (sum_g fma(s_g, float(sum q*n), z_g * float(sum q))) * qs
// with qs = the query head's scale times the attention scale.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace kvlm {

// The g query heads of one KV head, quantized for one codec.
struct QuantQuery {
  DType dtype = DType::Int8;
  int g = 0, hd = 0;
  std::vector<int8_t> codes;  // [g padded to 8s][hd], zero past g; int4: each group of 32 stored as its 16 even then 16 odd elements
  std::vector<float> qs;      // [g padded] the head's scale times the attention scale
  std::vector<int32_t> sums;  // [g padded][groups] the codes' sum per group (int8: one group, the head)
  int groups() const { return dtype == DType::Int4 ? hd / 32 : 1; }
  void prepare(DType t, const float* q, int g, int hd, float scale);
};

// Whether keys of this codec are scored in integers for groups of `group` query heads: int8 and
// int4 with head sizes of 32s up to 256, for groups of 4 or more heads (the SIMD kernels score eight heads
// of one key at once; fewer heads read their keys through the f32 kernels, attn_scores_encoded).
bool integer_scores(const KvRowCodec& c, int group);

// s[i * s_stride + j] for the g heads and the n encoded keys.
void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride);

namespace scalar {
void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride);
}

}  // namespace kvlm
