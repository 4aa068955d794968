#include "kernels/attention_amx.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/qgemm_amx.h"

#if KVLM_AMX
#include <immintrin.h>
#endif

namespace kvlm {

bool amx_scores(DType t, int hd, int g) {
  return t == DType::Int8 && hd % 64 == 0 && hd <= 256 && g >= 4 && g <= 16 && amx_usable();
}
bool amx_values(DType t, int hd, int g) { return g >= 8 && amx_scores(t, hd, g); }

namespace amx {

namespace {
constexpr int kKeys = 16;                // keys per score tile: the A tile's rows
constexpr int kColumns = 16;             // the B and C tiles' columns: query heads, or value elements
constexpr int kStep = 64;                // head elements per score multiply: the A tile's row
constexpr int kTileBytes = 1024;         // a 16 x 64-byte tile
constexpr int kQuads = kValueBlock / 4;  // a value block's keys, four to a B-tile row
}  // namespace

void query_tiles(const int8_t* codes, int g, int hd, Buffer<int8_t>& tiles) {
  const int steps = hd / kStep, cols = tile_columns(g), offsets = kColumns / cols;
  tiles.assign(static_cast<size_t>(offsets) * steps * kTileBytes, 0);
  for (int o = 0; o < offsets; ++o)
    for (int st = 0; st < steps; ++st)
      for (int i = 0; i < g; ++i)
        for (int r = 0; r < kStep / 4; ++r)  // row r: bytes 4r..4r+3 of each head's step
          std::memcpy(tiles.data() + (static_cast<size_t>(o) * steps + st) * kTileBytes + r * 64 + 4 * (o * cols + i),
                      codes + static_cast<size_t>(i) * hd + st * kStep + 4 * r, 4);
}

#if KVLM_AMX

KVLM_AMX_TARGET_BEGIN

namespace {
// The tile registers, by number (GCC's intrinsics paste the number into the instruction, so
// these are macros). 0-4 are 16 x 64 bytes, and all of them the value sums' C tiles.
#define KVLM_TILE_KEYS0 0    // scores A: 16 keys x 64 int8 (even items)
#define KVLM_TILE_KEYS1 1    // (odd items)
#define KVLM_TILE_QUERY 2    // scores B: 16 rows x (16 columns x 4 int8)
#define KVLM_TILE_SUMS0 3    // scores C: 16 keys x 16 columns of int32 (even items)
#define KVLM_TILE_SUMS1 4    // (odd items)
#define KVLM_TILE_WEIGHTS 5  // values A: 16 heads x 32 weights
#define KVLM_TILE_ROWS0 6    // values B: 8 quads x (16 elements x 4 keys' int8)
#define KVLM_TILE_ROWS1 7

const TileConfig& attention_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int x : {KVLM_TILE_KEYS0, KVLM_TILE_KEYS1, KVLM_TILE_QUERY, KVLM_TILE_SUMS0, KVLM_TILE_SUMS1}) t.set(x, 16, 64);
    t.set(KVLM_TILE_WEIGHTS, kColumns, kValueBlock);
    for (int x : {KVLM_TILE_ROWS0, KVLM_TILE_ROWS1}) t.set(x, kQuads, kColumns * 4);
    return t;
  }();
  return c;
}

// GCC's tile loads name only their address as read: every store before one must stay before it.
inline void stores_before_tile_loads() { asm volatile("" ::: "memory"); }

// r[x] lane h -> r[h] lane x (a 16 x 16 transpose): 32-bit pairs, then 64-bit, then 128-bit lanes.
inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  for (int i = 0; i < 4; ++i) {  // u[4i + e], lane L: rows 4i..4i+3 of column 4L + e
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44), u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44), u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int e = 0; e < 4; ++e) {  // the four 128-bit lanes of u[e], u[4 + e], u[8 + e], u[12 + e] transposed
    const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88), v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
    r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88), r[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88), r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// Four rows' 64 bytes from `at` as B-tile rows: out[L] (64 bytes) holds elements 16L..16L+15,
// each as the four keys' codes of one element (element e of key i at byte 4e + i).
inline void interleave4_rows(const uint8_t* const* r, size_t at, __m512i* out) {
  const __m512i a = _mm512_loadu_si512(r[0] + at), b = _mm512_loadu_si512(r[1] + at);
  const __m512i c = _mm512_loadu_si512(r[2] + at), d = _mm512_loadu_si512(r[3] + at);
  const __m512i ab_lo = _mm512_unpacklo_epi8(a, b), ab_hi = _mm512_unpackhi_epi8(a, b);
  const __m512i cd_lo = _mm512_unpacklo_epi8(c, d), cd_hi = _mm512_unpackhi_epi8(c, d);
  // e[m] lane L: elements 16L + 4m .. 16L + 4m + 3 of the four keys
  const __m512i e0 = _mm512_unpacklo_epi16(ab_lo, cd_lo), e1 = _mm512_unpackhi_epi16(ab_lo, cd_lo);
  const __m512i e2 = _mm512_unpacklo_epi16(ab_hi, cd_hi), e3 = _mm512_unpackhi_epi16(ab_hi, cd_hi);
  const __m512i v0 = _mm512_shuffle_i32x4(e0, e1, 0x88), v1 = _mm512_shuffle_i32x4(e0, e1, 0xDD);
  const __m512i v2 = _mm512_shuffle_i32x4(e2, e3, 0x88), v3 = _mm512_shuffle_i32x4(e2, e3, 0xDD);
  out[0] = _mm512_shuffle_i32x4(v0, v2, 0x88), out[2] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
  out[1] = _mm512_shuffle_i32x4(v1, v3, 0x88), out[3] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
}

// One score item's multiplies: KV heads [h0, h0 + nh) of 16 keys (their first head's codes at
// keys) into columns h * cols.. of C.
#define KVLM_SCORE_ITEM(A, C)                                                                       \
  do {                                                                                              \
    _tile_zero(C);                                                                                  \
    for (int h = 0; h < nh; ++h)                                                                    \
      for (int st = 0; st < steps; ++st) {                                                          \
        _tile_loadd(A, keys + h * hd + st * kStep, static_cast<long>(db));                          \
        _tile_loadd(KVLM_TILE_QUERY, qq[h0 + h].tiles.data() + (h * steps + st) * kTileBytes, 64); \
        _tile_dpbssd(C, A, KVLM_TILE_QUERY);                                                        \
      }                                                                                             \
  } while (0)
}  // namespace

int scores_int8(const QuantQuery* qq, int heads, const EncodedRows& k, int n, float* s, size_t s_stride, size_t s_head) {
  const int g = qq[0].g, hd = qq[0].hd;
  for (int x = 0; x < heads; ++x)
    KVLM_CHECK(qq[x].dtype == DType::Int8 && qq[x].g == g && qq[x].hd == hd && !qq[x].tiles.empty() && amx_scores(DType::Int8, hd, g),
               "the queries have no AMX tiles for these keys");
  const int steps = hd / kStep, cols = tile_columns(g), per = kColumns / cols;  // per: KV heads a C tile holds
  const int packs = (heads + per - 1) / per, items = n / kKeys * packs;
  const size_t db = k.codec->data_bytes(), pn = static_cast<size_t>(k.codec->n_params());
  const size_t heads_at = static_cast<size_t>(k.h) * hd, heads_bytes = static_cast<size_t>(heads) * hd;
  use_tile_config(attention_config());
  alignas(64) int32_t sums[2][kKeys][kColumns];
  // Item x: keys 16 (x / packs).., KV heads per (x % packs)..; even items on the first tile set, odd
  // ones on the second, so that one item's multiplies run while the last one's sums are stored
  // and scaled (a tile store waits for its multiplies, and the loads after it for the store).
  auto multiply = [&](int x) {
    const int j = x / packs * kKeys, h0 = x % packs * per, nh = std::min(per, heads - h0);
    const uint8_t* keys = k.data + j * db + heads_at + static_cast<size_t>(h0) * hd;
    if (h0 == 0) {  // the heads' keys and parameters 32 ahead, as the AVX-512 kernels ask for them
      for (int y = 0; y < kKeys; ++y)
        for (size_t o = 0; o < heads_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(keys + (32 + y) * db + o), _MM_HINT_T0);
      const char* prm = reinterpret_cast<const char*>(k.params + (j + 32) * pn);
      for (size_t o = 0; o < kKeys * pn * sizeof(float); o += 64) _mm_prefetch(prm + o, _MM_HINT_T0);
    }
    if (x % 2 == 0) KVLM_SCORE_ITEM(KVLM_TILE_KEYS0, KVLM_TILE_SUMS0);
    else KVLM_SCORE_ITEM(KVLM_TILE_KEYS1, KVLM_TILE_SUMS1);
  };
  auto store = [&](int x) {
    if (x % 2 == 0) _tile_stored(KVLM_TILE_SUMS0, sums[0], sizeof sums[0][0]);
    else _tile_stored(KVLM_TILE_SUMS1, sums[1], sizeof sums[0][0]);
  };
  // As the scalar twin: (float(dot) * key scale) * head scale, lane by lane; then heads x keys.
  auto scale = [&](int x) {
    const int j = x / packs * kKeys, h0 = x % packs * per, nh = std::min(per, heads - h0);
    alignas(64) float qs[kColumns];
    for (int c = 0; c < kColumns; ++c) qs[c] = c / cols < nh ? qq[h0 + c / cols].qs[c % cols] : 0.0f;  // qs is zero past g
    const __m512 qsv = _mm512_load_ps(qs);
    const __m512i head_of = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), __builtin_ctz(cols));
    const __mmask16 live = static_cast<__mmask16>((1u << nh) - 1);
    __m512 r[kKeys];
    for (int y = 0; y < kKeys; ++y) {
      const __m512 sk = _mm512_permutexvar_ps(head_of, _mm512_maskz_loadu_ps(live, k.params + (j + y) * pn + k.h + h0));
      r[y] = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[x % 2][y])), sk), qsv);
    }
    transpose16(r);
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < g; ++i) _mm512_storeu_ps(s + (h0 + h) * s_head + i * s_stride + j, r[h * cols + i]);
  };
  stores_before_tile_loads();
  if (items > 0) multiply(0);
  for (int x = 0; x < items; ++x) {
    if (x + 1 < items) multiply(x + 1);
    store(x);
    scale(x);
  }
  return n / kKeys * kKeys;
}

namespace {
// Chunk rows of a value block on tiles: C (sums) = A (the heads' weights) x B (the chunk's rows).
#define KVLM_VALUE_CHUNK(C, B, rows) \
  do {                               \
    _tile_zero(C);                   \
    _tile_loadd(B, rows, kColumns * 4); \
    _tile_dpbssd(C, KVLM_TILE_WEIGHTS, B); \
  } while (0)
}  // namespace

void values_int8(AttnState* st, int heads, const float* p, size_t p_stride, size_t p_head, const uint8_t* const* rows,
                 size_t row_step, const float* const* prm, size_t prm_step, int n) {
  const int g = st[0].g, hd = st[0].hd, nd = hd / kColumns;
  for (int x = 0; x < heads; ++x)
    KVLM_CHECK(st[x].g == g && st[x].hd == hd && amx_values(DType::Int8, hd, g), "AMX value sums do not take these heads");
  alignas(64) static const uint8_t zero_row[256] = {};
  // Two heads' operands, the next one's prepared while the tiles multiply this one's.
  alignas(64) int8_t tiles[2][256 / kColumns][kQuads][kColumns * 4];  // per 16 elements, the block's B tile
  alignas(64) uint8_t u[2][kColumns][kValueBlock];                   // the A tile
  alignas(64) int32_t sums[4][kColumns][kColumns];
  alignas(64) float sv[kValueBlock];
  float ws[2][kColumns];
  for (auto& w : u)
    for (int i = g; i < kColumns; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(w[i]), _mm256_setzero_si256());
  use_tile_config(attention_config());
  for (int j0 = 0; j0 < n; j0 += kValueBlock) {
    const int nb = std::min(kValueBlock, n - j0);
    // Head h's weights and rows into operand set b.
    auto prepare = [&](int h, int b) {
      for (int x = 0; x < kValueBlock; ++x) sv[x] = x < nb ? prm[j0 + x][h * prm_step] : 0.0f;
      avx512::value_block_weights(p + h * p_head + j0, p_stride, sv, nb, g, u[b][0], ws[b]);
      for (int qd = 0; qd < kQuads; ++qd) {
        const uint8_t* r[4];
        for (int i = 0; i < 4; ++i) r[i] = 4 * qd + i < nb ? rows[j0 + 4 * qd + i] + h * row_step : zero_row;  // zero weight too
        for (int at = 0; at < hd; at += 64) {
          __m512i out[4];
          interleave4_rows(r, at, out);
          for (int L = 0; L < 4; ++L) _mm512_store_si512(tiles[b][at / kColumns + L][qd], out[L]);
        }
      }
    };
    prepare(0, 0);
    for (int h = 0; h < heads; ++h) {
      const int b = h % 2;
      stores_before_tile_loads();
      _tile_loadd(KVLM_TILE_WEIGHTS, u[b], kValueBlock);
      // Four chunks at a time, every multiply before the first store (which waits for its multiply).
      for (int c0 = 0; c0 < nd; c0 += 4) {
        const int nc = std::min(4, nd - c0);
        KVLM_VALUE_CHUNK(KVLM_TILE_SUMS0, KVLM_TILE_ROWS0, tiles[b][c0][0]);
        if (nc > 1) KVLM_VALUE_CHUNK(KVLM_TILE_SUMS1, KVLM_TILE_ROWS1, tiles[b][c0 + 1][0]);
        if (nc > 2) KVLM_VALUE_CHUNK(KVLM_TILE_KEYS0, KVLM_TILE_ROWS0, tiles[b][c0 + 2][0]);
        if (nc > 3) KVLM_VALUE_CHUNK(KVLM_TILE_KEYS1, KVLM_TILE_ROWS1, tiles[b][c0 + 3][0]);
        if (c0 == 0 && h + 1 < heads) prepare(h + 1, 1 - b);  // the vector units' work while the tiles multiply
        _tile_stored(KVLM_TILE_SUMS0, sums[0], sizeof sums[0][0]);
        if (nc > 1) _tile_stored(KVLM_TILE_SUMS1, sums[1], sizeof sums[0][0]);
        if (nc > 2) _tile_stored(KVLM_TILE_KEYS0, sums[2], sizeof sums[0][0]);
        if (nc > 3) _tile_stored(KVLM_TILE_KEYS1, sums[3], sizeof sums[0][0]);
        for (int i = 0; i < g; ++i) {  // acc = fma(ws, float(sum), acc), as the scalar twin
          float* acc = st[h].acc + static_cast<size_t>(i) * hd + c0 * kColumns;
          const __m512 w = _mm512_set1_ps(ws[b][i]);
          for (int c = 0; c < nc; ++c)
            _mm512_storeu_ps(acc + c * kColumns, _mm512_fmadd_ps(w, _mm512_cvtepi32_ps(_mm512_load_si512(sums[c][i])), _mm512_loadu_ps(acc + c * kColumns)));
        }
      }
    }
  }
}

KVLM_AMX_TARGET_END

#else  // no tiles on this build
int scores_int8(const QuantQuery*, int, const EncodedRows&, int, float*, size_t, size_t) {
  KVLM_CHECK(false, "AMX tiles asked for on a build without them");
  return 0;
}
void values_int8(AttnState*, int, const float*, size_t, size_t, const uint8_t* const*, size_t, const float* const*, size_t, int) {
  KVLM_CHECK(false, "AMX tiles asked for on a build without them");
}
#endif

}  // namespace amx
}  // namespace kvlm
