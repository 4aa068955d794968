// Quantized matrix multiply on Intel AMX tiles: Q8_0 / Q4_0 packed groups (kernels/qgemm.h)
// against 16-token tiles of Q8_0 activations, for prefill and batched decode.
//
// One 32-value block at a time, as the Q8_0 scales demand: a tile multiply (TDPBSSD) gives the
// block's int32 dot products of 16 tokens x 16 rows, then AVX-512 scales them by weight scale x
// token scale and adds them to f32 sums held in registers. The pair's two groups are copied once
// (Q4_0: widened from nibbles) into one int8 B tile per block, 16 rows wide, and the blocks go
// through two sets of tiles in turn, so one block's multiply runs while the last one's sums are
// scaled. Same integer block sums and fused multiply-add order as scalar::qgemm_group: the
// result equals it bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/qgemm.h"

namespace kvlm {

constexpr int kAmxTokens = 16;  // tokens per tile: the A tile's 16 rows
constexpr int kAmxRows = 2 * kGroupRows;  // weight rows per multiply: two packed groups

// Whether this thread may run the tiles now (the CPU has AMX-INT8, the OS granted the tile
// state and the thread's ISA cap reaches Isa::Amx).
bool amx_usable();

// Two packed groups (or the last one alone) ready for tile multiplies. Binds the tile layout and
// a scratch of this thread's to it for its life: build it on the thread that multiplies, one
// at a time.
class AmxGroupPair {
 public:
  // groups: 1 or 2 consecutive groups from `first`, each q_group_bytes(f, nb) long.
  AmxGroupPair(DType f, const uint8_t* first, int groups, int nb);
  ~AmxGroupPair();
  AmxGroupPair(const AmxGroupPair&) = delete;
  AmxGroupPair& operator=(const AmxGroupPair&) = delete;

  // out[t][i] = dot(row i of the pair, token t0 + t) for 16 tokens from t0 (t0 + 16 <= a.n);
  // columns 8..15 are unspecified when the pair is one group.
  void multiply(const QuantizedActs& a, int t0, float out[kAmxTokens][kAmxRows]) const;

 private:
  int nb_;
  int8_t* tiles_ = nullptr;  // [block][8 quads][16 rows][4 values]: the B tile of each block
  float* scales_ = nullptr;  // [block][16 rows]: the rows' f32 scales (0 past the last group)
};

// The tile loop behind AmxGroupPair and the 32-value row-quant tiles (kernels/row_tiles.h): nb =
// a.nb blocks of B tiles, [block][8 quads][16 rows][4 int8], with the rows' f32 scales
// [block][16]; with mins (else null), the rows' min terms [block][16] against act_sums
// [token][block]. For 16 tokens from t0, per block in order: out = fma(scale * dx, sum, out),
// then out = fma(-min, act_sum, out). The caller checked amx_usable() and t0.
void amx_multiply_blocks(const int8_t* tiles, const float* scales, const float* mins, const QuantizedActs& a,
                         const float* act_sums, int t0, float out[kAmxTokens][kAmxRows]);

}  // namespace kvlm
