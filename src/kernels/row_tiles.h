// Prefill for the row-quant types (kernels/row_dot.h) on tile multiplies: 16 rows at a time,
// unpacked once per call into int8 tiles, against 16 tokens of int8 activations.
//
// Two layouts, as the type's block is 32 or 256 values:
// - 32-value types (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4), activations in Q8_0 blocks of 32. Per
//   block the 16 rows' values form one B tile, their quads (4 consecutive values) interleaved as
//   the int8 tile multiply reads them: q [block b][quad j][row i][values 4j..4j+3];
//   sv [b][i] = d, mn [b][i] = m * min. Per block: the int32 sum of q x xq, then
//   acc = fma(sv * dx, sum, acc), then acc = fma(-mn, dx * sum(xq), acc).
// - Super-block types (Q2_K..Q6_K, IQ4_XS), activations with one scale per 256 (ggml's Q8_K).
//   A value times its sub-scale, w = q * scale, is an exact int16 (|w| <= 127 * 32), split in two
//   int8 tiles, w = 128 * hi + lo: per 64 values a hi and a lo B tile. The tiles sum a whole
//   super-block in int32 (exact: at most 256 * 127 * 4096 < 2^31) before one float step:
//   acc = fma(d * dx, 128 * hi_sum + lo_sum, acc), then with mins
//   acc = fma(-(m * dx), sum over sixteens of min * sum(xq), acc).
// The scalar twin follows the same order, so the tile kernel equals it bit for bit.
//
// The tile layout is what AMX's TDPBSSD reads (one quad of 16 rows is 64 bytes, one zmm register).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "kernels/dtype.h"
#include "kernels/qgemm.h"
#include "kernels/row_dot.h"

namespace kvlm {

constexpr int kTileRows = 16;    // rows per packed tile group
constexpr int kTileTokens = 16;  // tokens per multiply

// Whether tile multiplies of type t run on this thread now: on AMX, or reading the same layout a
// quad at a time on AVX-512 VNNI (row_tiles_avx512.cpp) or AVX2 (row_tiles_avx2.cpp; not IQ4_NL).
bool row_tiles_usable(DType t);
// Gives this thread's tile state back once its multiplies are done (AMX's TILERELEASE).
void row_tiles_release();

// How super-block rows are laid out: with each sub-scale folded into its values (split in hi and
// lo bytes: two byte products per value, AMX's choice, where one tile multiply takes a whole
// super-block), or unfolded (the values' bytes as they are, one product per value, and one int32
// multiply by the sub-scale per 16 or 32 values: fewer instructions where a quad at a time is read).
enum class TileLayout { Folded, Unfolded };
// The layout the kernel this thread would run on type t reads (AMX: Folded; else Unfolded).
TileLayout row_tiles_layout(DType t);

// Up to 16 rows of one matrix in the tile layout; rows past the last are zero. Reused from
// group to group (the buffers keep their size).
struct RowTiles {
  DType type = DType::F32;
  int in = 0;
  int block = 32;  // the type's block: 32, or a super-block of 256
  bool has_min = false;
  TileLayout layout = TileLayout::Folded;  // (32-value blocks have one layout, as Folded)
  // 32 and 256 unfolded: [in / 4 quads][16 rows][4] values;
  // 256 folded: [in / 64][hi, lo][16 quads][16 rows][4]
  Buffer<int8_t> q;
  Buffer<float> sv;  // [in / block][16 rows]: d
  Buffer<float> mn;  // [in / block][16 rows]: 32: m * min; 256: m (empty without mins)
  // 256 with mins: [in / 256][8 pairs][16 rows], the mins of sixteens 2p and 2p + 1 as two int16
  Buffer<int32_t> mins;
  // 256 unfolded: values per sub-scale (16 or 32), the sub-scales [in / sub][16 rows], and where
  // the values are signed (read as q + 128 by unsigned-by-signed products) the sub-scales again
  // in pairs [in / sub / 2][16 rows] as two int16, to take the 128 back out
  int sub = 16;
  bool lifted = false;
  Buffer<int32_t> sub_scales, scale_pairs;

  // Packs n_rows <= 16 stored rows of `in` values, row r at rows + r * row_bytes; u unpacks
  // them (a RowQuants of the same type and size, reused).
  void pack(const uint8_t* rows, int n_rows, size_t row_bytes, RowQuants& u, TileLayout layout);
  void pack(const uint8_t* rows, int n_rows, size_t row_bytes, RowQuants& u) {
    pack(rows, n_rows, row_bytes, u, row_tiles_layout(u.type));
  }
};

// Per token and 32-value block, dx * (the sum of its quantized values): the 32-value types' min
// term. a holds Q8_0 blocks; out is [a.n_padded][a.in / 32].
void row_tile_act_sums(const QuantizedActs& a, float* out);

// out[t * 16 + i] = dot(row i, token t) for every token a's buffers hold (a.n_padded: quantize
// them padded to 16), in blocks of p.block. act_sums: row_tile_act_sums (32-value types with
// mins; unread otherwise).
void row_tile_multiply(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out);

namespace scalar {
void row_tile_multiply(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out);
}  // namespace scalar

// Row i of a super-block layout's hi and lo tiles from its unpacked values (AVX-512; the caller
// checked amx_usable()).
void pack_super_row_amx(const RowQuants& u, int i, int8_t* q);

// The AMX kernel (the caller checked amx_usable()).
void row_tile_multiply_amx(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out);
// The AVX-512 VNNI kernel, for CPUs without AMX (the caller checked isa_at_least(Isa::Avx512)).
void row_tile_multiply_avx512(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out);
// The AVX2 kernel (the caller checked isa_at_least(Isa::Avx2) and row_tiles_avx2_lift(p.type) >= 0).
void row_tile_multiply_avx2(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out);
// What the AVX2 kernel adds to a weight byte of a 32-value type t so that its products cannot
// saturate; -1 where no lift can (IQ4_NL) and for the super-block types (read unfolded, each its own way).
int row_tiles_avx2_lift(DType t);

}  // namespace kvlm
