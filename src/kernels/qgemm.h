// Quantized matrix multiply: Q8_0 / Q4_0 weights against Q8_0-quantized activations.
//
// Weights are repacked at load into groups of 8 output rows. Per 32-value block a group holds
// the 8 rows' f16 scales, then the values interleaved 4 at a time, so one 32-byte register holds
// 4 values of each of the 8 rows and an int8 multiply-add yields 8 row sums at once:
//   Q8_0: [8 x f16 scale][8 chunks j][8 rows i][4 int8: values 4j..4j+3 of row i]      272 bytes
//   Q4_0: [8 x f16 scale][4 chunks j][8 rows i][4 bytes 4j..4j+3 of row i's GGUF block] 144 bytes
// (in a Q4_0 byte k, the low nibble is value k and the high nibble value k+16, as in GGUF).
// Q4_0 nibbles stay unsigned (0..15): sum(u*x) - 8*sum(x) replaces per-value sign handling, and
// eight 4-bit products fit an int16 lane before widening.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "kernels/dtype.h"

namespace kvlm {

class ThreadPool;


constexpr int kGroupRows = 8;
// A packed block starts with its 8 rows' f16 scales; the quants follow.
constexpr size_t kPackedScaleBytes = kGroupRows * sizeof(uint16_t);

// Bytes of one packed block of 8 rows, and of a whole group over nb blocks.
size_t q_block_bytes(DType f);
inline size_t q_group_bytes(DType f, int nb) { return q_block_bytes(f) * nb; }

// Quantizes rows [out][in] (in a multiple of 32) and packs them; rows past `out` in the last
// group are zero. Returns ceil(out/8) groups.
Buffer<uint8_t> pack_quantized(DType f, const float* w, int out, int in);
// Packs n_rows <= 8 rows stored as GGUF blocks into one group (rows past n_rows zero).
void pack_gguf_group(DType f, const uint8_t* rows, int n_rows, int in, uint8_t* group);
// Packs rows stored as GGUF blocks ([f16 scale][quants], 34 / 18 bytes) as they are.
Buffer<uint8_t> pack_gguf_blocks(DType f, const uint8_t* rows, int out, int in);
// The f32 values packed weights stand for (as GGUF's dequantize gives them).
void unpack_to_f32(DType f, const uint8_t* packed, int out, int in, float* w);

// Activations quantized to int8 with a scale per block, one row per token: Q8_0 (blocks of 32),
// or, beside the 256-value super-block types, one scale per 256 as ggml's Q8_K has (so a
// super-block's integer sums add up before any float).
struct QuantizedActs {
  int n = 0, in = 0, nb = 0, block = 32;
  int n_padded = 0;   // tokens the buffers hold: n, or n rounded up to the padding asked for
  Buffer<float> d;    // [n][nb] block scales
  Buffer<int8_t> q;   // [n][in]
  Buffer<float> x8;   // [n][nb] 8 * sum of the block's quants (the Q4_0 offset term; blocks of 32)
  Buffer<int16_t> s16;  // [n][in / 16] sums of each 16 quants (the row-quant types' min term)
  Buffer<float> sub_sums;  // scratch for the row tiles' min term (kernels/row_tiles.h)
  // pool: where a large batch is split (default: the process pool). block: 32 or 256.
  // pad_tokens: the buffers hold n rounded up to a multiple of it, the extra tokens zero (so a
  // 16-token tile multiply may run over the last tokens).
  void quantize(const float* x, int n_tokens, int in_features, ThreadPool* pool = nullptr, int block_values = 32,
                int pad_tokens = 1);
};

// out[t][i] = dot(row i of the group, token t0 + t), for nt <= 4 tokens.
void qgemm_group(DType f, const uint8_t* group, const QuantizedActs& a, int t0, int nt, float out[][kGroupRows]);

namespace scalar {
void pack_gguf_group(DType f, const uint8_t* rows, int n_rows, int in, uint8_t* group);
// Same arithmetic in the same order (integer block sums, then one fused multiply-add per
// block), so the result is bit-identical to the dispatched kernel.
void qgemm_group(DType f, const uint8_t* group, const QuantizedActs& a, int t0, int nt, float out[][kGroupRows]);
}  // namespace scalar

}  // namespace kvlm
