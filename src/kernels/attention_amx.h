// int8 attention on AMX tiles: a GQA group's scores and value sums as tile multiplies (TDPBSSD),
// where the AVX-512 kernels (attention_int.h) spent a long-context decode step in their
// multiply-adds and shuffles. Several KV heads per call (a piece's rows of a thread's heads), so
// one head's tile work runs while the core prepares the next head's.
//
// Scores, 16 keys at a time: A tiles are the keys' int8 codes read in place (16 rows a KV row
// apart, 64 bytes of one head each), B tiles the query heads' codes (QuantQuery::tiles), the C
// tile their exact int32 dots, 16 keys x 16 columns. Groups of up to 4 or 8 query heads share a
// C tile between 4 or 2 KV heads (each KV head's multiplies fill its own columns), so that one
// transpose to heads x keys serves them all.
// Values, a block of 32 keys at a time: the A tile is the group's quantized block weights (32
// bytes a head), the B tiles the block's rows interleaved four keys to a 32-bit word (16 elements
// a tile), the C tiles the exact int32 sums, folded into the accumulators.
// The integers are exact and the float operations after them are the scalar twin's, so both
// equal scalar::attn_scores_quantized and scalar::attn_accumulate_quantized bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention_int.h"

namespace kvlm::amx {

// Query heads a KV head takes in a score tile's 16 columns: 4, 8 or 16 (g <= 16).
inline int tile_columns(int g) { return g <= 4 ? 4 : g <= 8 ? 8 : 16; }

// q's codes as B tiles (QuantQuery::tiles): codes [g][hd], zero past g.
void query_tiles(const int8_t* codes, int g, int hd, Buffer<int8_t>& tiles);

// attn_scores_quantized_heads for int8 keys (amx_scores), keys [0, n / 16 * 16); returns the keys
// scored (the rest are the caller's).
int scores_int8(const QuantQuery* qq, int heads, const EncodedRows& k, int n, float* s, size_t s_stride, size_t s_head);

// attn_accumulate_quantized_heads for int8 rows (amx_values).
void values_int8(AttnState* st, int heads, const float* p, size_t p_stride, size_t p_head, const uint8_t* const* rows,
                 size_t row_step, const float* const* prm, size_t prm_step, int n);

}  // namespace kvlm::amx
