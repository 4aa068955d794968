#include "kernels/row_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/ggml_blocks.h"
#include "kernels/qgemm_amx.h"

namespace kvlm {

bool row_tiles_usable(DType t) {
  return amx_usable() || isa_at_least(Isa::Avx512) ||
         (isa_at_least(Isa::Avx2) && (dtype_block(t) == 256 || row_tiles_avx2_lift(t) >= 0));
}

void row_tiles_release() {
  if (amx_usable()) release_tile_config();
}

namespace {
// Row i of the super-block layout: w = q * scale = 128 * hi + lo (lo in 0..127); value v goes to
// quad v / 4 % 16 of the hi and lo tiles of its 64 values.
void pack_super_row(const RowQuants& u, int i, int8_t* q) {
  for (int v = 0; v < u.in; ++v) {
    const int w = u.q[v] * u.scale[v / 16];
    const size_t at = (static_cast<size_t>(v / 64) * 2 * 16 + v / 4 % 16) * kTileRows * 4 + i * 4 + v % 4;
    q[at] = static_cast<int8_t>(w >> 7);
    q[at + 16 * kTileRows * 4] = static_cast<int8_t>(w & 127);
  }
}
}  // namespace

TileLayout row_tiles_layout(DType) { return amx_usable() ? TileLayout::Folded : TileLayout::Unfolded; }

namespace {
// Values per sub-scale of a super-block type: Q4_K, Q5_K and IQ4_XS scale 32 values at a time.
int sub_block_of(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::IQ4_XS ? 32 : 16; }
}  // namespace

void RowTiles::pack(const uint8_t* rows, int n_rows, size_t row_bytes, RowQuants& u, TileLayout how) {
  KVLM_CHECK(n_rows >= 1 && n_rows <= kTileRows, "packing ", n_rows, " rows into tiles of ", kTileRows);
  type = u.type;
  in = u.in;
  block = u.block;
  has_min = u.has_min;
  layout = block == 256 ? how : TileLayout::Folded;
  const bool folded = block == 256 && layout == TileLayout::Folded;
  sub = sub_block_of(type);
  lifted = block == 256 && !folded && !u.unsigned_q;
  const int nblk = in / block;
  q.resize(static_cast<size_t>(in) * kTileRows * (folded ? 2 : 1));
  sv.resize(static_cast<size_t>(nblk) * kTileRows);
  mn.resize(has_min ? static_cast<size_t>(nblk) * kTileRows : 0);
  mins.resize(has_min && block == 256 ? static_cast<size_t>(nblk) * 8 * kTileRows : 0);
  sub_scales.resize(block == 256 && !folded ? static_cast<size_t>(in / sub) * kTileRows : 0);
  scale_pairs.resize(lifted ? static_cast<size_t>(in / sub / 2) * kTileRows : 0);
  if (n_rows < kTileRows) {  // the rows past the last: zero values and scales
    std::fill(q.begin(), q.end(), int8_t{0});
    std::fill(sv.begin(), sv.end(), 0.0f);
    std::fill(mn.begin(), mn.end(), 0.0f);
    std::fill(mins.begin(), mins.end(), 0);
    std::fill(sub_scales.begin(), sub_scales.end(), 0);
    std::fill(scale_pairs.begin(), scale_pairs.end(), 0);
  }
  for (int i = 0; i < n_rows; ++i) {
    unpack_row(rows + static_cast<size_t>(i) * row_bytes, u);
    if (!folded) {
      // Value v is quad v / 4: its byte in the quad's 16 rows.
      for (int g = 0; g < in / 4; ++g) std::memcpy(&q[(static_cast<size_t>(g) * kTileRows + i) * 4], u.q + 4 * g, 4);
    } else if (amx_usable()) {
      pack_super_row_amx(u, i, q.data());
    } else {
      pack_super_row(u, i, q.data());
    }
    for (int k = 0; k < static_cast<int>(sub_scales.size()) / kTileRows; ++k)
      sub_scales[static_cast<size_t>(k) * kTileRows + i] = u.scale[k * sub / 16];
    for (int k = 0; k < static_cast<int>(scale_pairs.size()) / kTileRows; ++k)
      scale_pairs[static_cast<size_t>(k) * kTileRows + i] = static_cast<int32_t>(
          static_cast<uint16_t>(u.scale[2 * k * sub / 16]) | static_cast<uint32_t>(static_cast<uint16_t>(u.scale[(2 * k + 1) * sub / 16])) << 16);
    for (int b = 0; b < nblk; ++b) {
      const size_t at = static_cast<size_t>(b) * kTileRows + i;
      const int v = b * block;  // the block's first value
      sv[at] = u.d[v / 32];
      if (!has_min) continue;
      if (block == 32) {
        mn[at] = u.m[v / 32] * static_cast<float>(u.min[v / 16]);
        continue;
      }
      mn[at] = u.m[v / 32];
      for (int pair = 0; pair < 8; ++pair)  // two int16 in one lane, as VNNI's pair products read them
        mins[(static_cast<size_t>(b) * 8 + pair) * kTileRows + i] = static_cast<int32_t>(
            static_cast<uint16_t>(u.min[v / 16 + 2 * pair]) | static_cast<uint32_t>(static_cast<uint16_t>(u.min[v / 16 + 2 * pair + 1])) << 16);
    }
  }
}

void row_tile_act_sums(const QuantizedActs& a, float* out) {
  KVLM_CHECK(a.block == 32, "activation sums of blocks of ", a.block);
  const int n16 = a.in / 16;
  for (int t = 0; t < a.n_padded; ++t) {
    const int16_t* s16 = a.s16.data() + static_cast<size_t>(t) * n16;
    const float* dx = a.d.data() + static_cast<size_t>(t) * a.nb;
    for (int b = 0; b < a.nb; ++b)
      out[static_cast<size_t>(t) * a.nb + b] = dx[b] * static_cast<float>(s16[2 * b] + s16[2 * b + 1]);
  }
}

namespace {
void check_multiply(const RowTiles& p, const QuantizedActs& a) {
  KVLM_CHECK(a.block == p.block && a.in == p.in && a.n_padded % kTileTokens == 0, "a tile multiply of ", a.n_padded,
             " tokens (", a.in, " values in blocks of ", a.block, ") by rows of ", p.in, " in blocks of ", p.block);
}
}  // namespace

namespace scalar {
void row_tile_multiply(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  check_multiply(p, a);
  const int nblk = p.in / p.block;
  for (int t = 0; t < a.n_padded; ++t) {
    const int8_t* xq = a.q.data() + static_cast<size_t>(t) * a.in;
    const float* dx = a.d.data() + static_cast<size_t>(t) * a.nb;
    const int16_t* s16 = a.s16.data() + static_cast<size_t>(t) * (a.in / 16);
    const float* xs = act_sums + static_cast<size_t>(t) * a.nb;
    for (int i = 0; i < kTileRows; ++i) {
      float acc = 0.0f;
      for (int b = 0; b < nblk; ++b) {
        int32_t sum = 0;
        for (int v = b * p.block; v < (b + 1) * p.block; ++v) {
          int w;
          if (p.block == 32) {
            w = p.q[(static_cast<size_t>(v / 4) * kTileRows + i) * 4 + v % 4];
          } else if (p.layout == TileLayout::Unfolded) {
            w = p.q[(static_cast<size_t>(v / 4) * kTileRows + i) * 4 + v % 4] * p.sub_scales[static_cast<size_t>(v / p.sub) * kTileRows + i];
          } else {
            const size_t at = (static_cast<size_t>(v / 64) * 2 * 16 + v / 4 % 16) * kTileRows * 4 + i * 4 + v % 4;
            w = 128 * p.q[at] + p.q[at + 16 * kTileRows * 4];
          }
          sum += w * xq[v];
        }
        const size_t at = static_cast<size_t>(b) * kTileRows + i;
        acc = std::fma(p.sv[at] * dx[b], static_cast<float>(sum), acc);
        if (!p.has_min) continue;
        if (p.block == 32) {
          acc = std::fma(-p.mn[at], xs[b], acc);
          continue;
        }
        int32_t msum = 0;
        for (int pair = 0; pair < 8; ++pair) {
          const uint32_t m2 = static_cast<uint32_t>(p.mins[(static_cast<size_t>(b) * 8 + pair) * kTileRows + i]);
          msum += static_cast<int16_t>(m2 & 0xFFFF) * s16[16 * b + 2 * pair] +
                  static_cast<int16_t>(m2 >> 16) * s16[16 * b + 2 * pair + 1];
        }
        acc = std::fma(-(p.mn[at] * dx[b]), static_cast<float>(msum), acc);
      }
      out[static_cast<size_t>(t) * kTileRows + i] = acc;
    }
  }
}
}  // namespace scalar

void row_tile_multiply(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  check_multiply(p, a);
  const bool folded = p.block == 32 || p.layout == TileLayout::Folded;
  if (folded && amx_usable()) return row_tile_multiply_amx(p, a, act_sums, out);
  if (isa_at_least(Isa::Avx512)) return row_tile_multiply_avx512(p, a, act_sums, out);
  if (isa_at_least(Isa::Avx2) && (p.block == 256 ? !folded : row_tiles_avx2_lift(p.type) >= 0))
    return row_tile_multiply_avx2(p, a, act_sums, out);
  scalar::row_tile_multiply(p, a, act_sums, out);
}

}  // namespace kvlm
