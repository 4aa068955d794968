// Attention against int8 and int4 rows in integers. Scores: the query is quantized once per row
// to int8 (a scale per head, as llama.cpp quantizes its query to the keys' q8_0 type), and each key's
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

#include "core/buffer.h"
#include "core/cpu.h"
#include "kernels/attention.h"

namespace kvlm {

// The g query heads of one KV head, quantized for one codec.
struct QuantQuery {
  DType dtype = DType::Int8;
  int g = 0, hd = 0;
  // 64-byte aligned (Buffer): every key reads 32 bytes of each head's codes, and a vector's
  // 16-byte alignment split half of those loads across two cache lines.
  Buffer<int8_t> codes;  // [g padded to 16s][hd], zero past g; int4: each group of 32 stored as its 16 even then 16 odd elements
  Buffer<float> qs;      // [g padded] the head's scale times the attention scale
  Buffer<int32_t> sums;  // [g padded][groups] the codes' sum per group (int8: one group, the head)
  // Where the AMX tile kernels score these keys (amx_scores): the codes as B tiles, one per 64
  // elements for each column offset o of the 16 / amx::tile_columns(g) a tile holds: row r
  // holds bytes 4r..4r+3 of head i at bytes 4 (o * tile_columns + i).. (attention_amx.h). Empty elsewhere.
  Buffer<int8_t> tiles;
  int groups() const { return dtype == DType::Int4 ? hd / 32 : 1; }
  void prepare(DType t, const float* q, int g, int hd, float scale);
};

// Whether the AMX tile kernels score int8 keys, and sum int8 values, of head size hd for groups
// of g query heads on this thread (attention_amx.h): the CPU has them, the head size is a
// multiple of 64 and the group at most 16 heads; values for groups of 8+ (groups of 4 ran
// Llama-3-8B-shaped decode attention slower on the tiles than on AVX-512).
bool amx_scores(DType t, int hd, int g);
bool amx_values(DType t, int hd, int g);

// Whether keys of this codec are scored in integers for groups of `group` query heads: int8 and
// int4 with head sizes of 32s up to 256, for groups of 4 or more heads (the SIMD kernels score eight heads
// of one key at once; fewer heads read their keys through the f32 kernels, attn_scores_encoded).
bool integer_scores(const KvRowCodec& c, int group);

// s[i * s_stride + j] for the g heads and the n encoded keys.
void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride);

// Values: int8 and int4 rows summed in integers. The softmax weights of a block of up to 32 keys, each
// times its row's scale, are quantized to 0..127 with one scale per head and block, and each
// element's sum over the block is exact in integers (pmaddubsw / vpdpbusd on four keys at once);
// in f32 a step was spent widening rows and in the multiply-adds of eight heads per row.
//   w_j = p_j * sv_j,  ws = max_j w_j / 127,  u_j = rint(w_j / ws),  acc = fma(ws, float(sum_j u_j * c_j), acc)
// (bench/query_quant_kld.py measures what the rounding of the weights costs.) Every ISA computes
// the same integers and float operations, so the SIMD paths are bit-identical to the scalar twin.
constexpr int kValueBlock = 32;
// int4 rows (groups of 32 elements with a scale s and a zero point z: v = s * nibble + z) the
// same way per group, with the scale folded into the weights, and the zero points' share
// sum_j p_j * z_j added in f32 (eight running sums, key j into sum j % 8, added pairwise):
//   acc = fma(ws, float(sum_j u_j * nibble_j), acc) + sum_j p_j * z_j
// Whether value rows are summed in integers for groups of `group` query heads: int8 and int4, as
// integer_scores.
bool integer_values(const KvRowCodec& c, int group);
// Adds keys [0, n) of int8 or int4 (t) rows, weighted by p[i * p_stride + j], to st.acc, in blocks
// of kValueBlock keys from the first. rows[j] is key j's bytes for this KV head (int4: its first
// group, 16 bytes a group) and prm[j] its parameters for this head (int8: the scale; int4: the
// first group's scale and zero point, the head's other groups following).
void attn_accumulate_quantized(DType t, AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows,
                               const float* const* prm, int n);

#if KVLM_X86
namespace avx512 {
// The value kernels' block weights of heads [0, nh) over one block of nb <= kValueBlock keys
// (block_weights): head i's weights p + i p_stride, times the keys' scales sv (zero past nb),
// into u + i kValueBlock (zero past nb) and its scale ws[i]. For the AMX value sums.
void value_block_weights(const float* p, size_t p_stride, const float* sv, int nb, int nh, uint8_t* u, float* ws);
}  // namespace avx512
#endif

// The same for KV heads [k.h, k.h + heads) at once: head k.h + x's query qq[x], its scores at
// s + x * s_head. On AMX tiles this shares tiles between heads and overlaps one head's tile work
// with the next one's; elsewhere it is the calls one head at a time. Equal to them bit for bit.
void attn_scores_quantized_heads(const QuantQuery* qq, int heads, const EncodedRows& k, int n, float* s, size_t s_stride,
                                 size_t s_head);
// And attn_accumulate_quantized for heads [0, heads): head x's state st[x], weights p + x * p_head,
// rows rows[j] + x * row_step and parameters prm[j] + x * prm_step (rows and prm: head 0's).
void attn_accumulate_quantized_heads(DType t, AttnState* st, int heads, const float* p, size_t p_stride, size_t p_head,
                                     const uint8_t* const* rows, size_t row_step, const float* const* prm,
                                     size_t prm_step, int n);

namespace scalar {
void attn_accumulate_quantized(DType t, AttnState& st, const float* p, size_t p_stride, const uint8_t* const* rows,
                               const float* const* prm, int n);
void attn_scores_quantized(const QuantQuery& q, const EncodedRows& k, int n, float* s, size_t s_stride);
}

}  // namespace kvlm
