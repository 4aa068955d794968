// The row-quant tile multiply on AMX (kernels/row_tiles.h). The super-block layout: four steps
// of 64 values on two sets of tiles in turn, each step's loads ahead of its multiplies, and a
// super-block's float step while the next one multiplies. The 32-value layout is Q8_0's: its
// loop is kernels/qgemm_amx.h's amx_multiply_blocks.
#include "kernels/row_tiles.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/qgemm_amx.h"

#if KVLM_AMX
#include <immintrin.h>
#endif

namespace kvlm {

#if KVLM_AMX

KVLM_AMX_TARGET_BEGIN
#if !defined(__clang__)
// Inlined into the templates, GCC reports the conversions' undefined start vector as plainly
// uninitialized as well (see KVLM_AMX_TARGET_BEGIN); popped with the target.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace {
// The tile registers, by number (the intrinsics paste the number into the instruction). 64
// values a step, even steps on the first set: one A and its hi and lo B tiles, summed into CH
// and CL over the super-block's four steps.
#define KVLM_ST_A0 0   // 16 tokens x 64 int8
#define KVLM_ST_H0 1   // 16 quads x (16 rows x 4 int8): the hi parts
#define KVLM_ST_L0 2   // the lo parts
#define KVLM_ST_A1 3
#define KVLM_ST_H1 4
#define KVLM_ST_L1 5
#define KVLM_ST_CH 6   // 16 tokens x 16 rows of int32: sum of hi x xq
#define KVLM_ST_CL 7   // sum of lo x xq

const TileConfig& super_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int x = 0; x < 8; ++x) t.set(x, 16, 64);  // every tile 16 x 64 bytes
    return t;
  }();
  return c;
}

// Two int16 as the int32 lane VNNI's pair multiplies read.
inline int32_t int16_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// A step's tile loads on set Set: 64 values of 16 tokens (A, rows `stride` apart) and the hi and
// lo B tiles of the same 64 values of 16 rows (b, then b + 1024).
template <int Set>
__attribute__((always_inline)) inline void load_step(const int8_t* x, long stride, const int8_t* b) {
  for (int t = 0; t < kTileTokens; ++t) _mm_prefetch(reinterpret_cast<const char*>(x + t * stride + 128), _MM_HINT_T0);
  if constexpr (Set == 0) {
    _tile_loadd(KVLM_ST_A0, x, stride);
    _tile_loadd(KVLM_ST_H0, b, 64);
    _tile_loadd(KVLM_ST_L0, b + 1024, 64);
  } else {
    _tile_loadd(KVLM_ST_A1, x, stride);
    _tile_loadd(KVLM_ST_H1, b, 64);
    _tile_loadd(KVLM_ST_L1, b + 1024, 64);
  }
}

template <int Set>
__attribute__((always_inline)) inline void multiply_step() {
  if constexpr (Set == 0) {
    _tile_dpbssd(KVLM_ST_CH, KVLM_ST_A0, KVLM_ST_H0);
    _tile_dpbssd(KVLM_ST_CL, KVLM_ST_A0, KVLM_ST_L0);
  } else {
    _tile_dpbssd(KVLM_ST_CH, KVLM_ST_A1, KVLM_ST_H1);
    _tile_dpbssd(KVLM_ST_CL, KVLM_ST_A1, KVLM_ST_L1);
  }
}

// Super-block b's float step, as the scalar twin: 128 * hi + lo, times d x dx; then the mins'
// integer sum (VNNI's int16 pairs), times m x dx, taken off.
template <bool HasMin>
__attribute__((always_inline)) inline void scale_super(__m512 (&acc)[kTileTokens], const int32_t (*hs)[kTileRows],
                                                       const int32_t (*ls)[kTileRows], const RowTiles& p,
                                                       const QuantizedActs& a, int t0, int b) {
  const __m512 d = _mm512_loadu_ps(p.sv.data() + static_cast<size_t>(b) * kTileRows);
  const float* dx = a.d.data() + static_cast<size_t>(t0) * a.nb + b;
#pragma GCC unroll 16
  for (int t = 0; t < kTileTokens; ++t) {
    const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(hs[t]), 7), _mm512_load_si512(ls[t]));
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx[t * a.nb])), _mm512_cvtepi32_ps(sum), acc[t]);
  }
  if constexpr (HasMin) {
    const __m512 m = _mm512_loadu_ps(p.mn.data() + static_cast<size_t>(b) * kTileRows);
    __m512i mins[8];
    for (int pair = 0; pair < 8; ++pair)
      mins[pair] = _mm512_loadu_si512(p.mins.data() + (static_cast<size_t>(b) * 8 + pair) * kTileRows);
    const int n16 = a.in / 16;
    const int16_t* s16 = a.s16.data() + static_cast<size_t>(t0) * n16 + 16 * b;
#pragma GCC unroll 16
    for (int t = 0; t < kTileTokens; ++t) {
      __m512i msum = _mm512_setzero_si512();
      for (int pair = 0; pair < 8; ++pair)
        msum = _mm512_dpwssd_epi32(msum, mins[pair], _mm512_set1_epi32(int16_pair(s16 + t * n16 + 2 * pair)));
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(m, _mm512_set1_ps(dx[t * a.nb])), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
}

// One unit of work: token tile `tile` over super-block sb.
struct Unit {
  int tile, sb;
};

template <bool HasMin>
void multiply_supers(const RowTiles& p, const QuantizedActs& a, float* out) {
  use_tile_config(super_config());
  const long stride = a.in;
  // Each token tile over the whole row: blocking the row in chunks that stay in L1 measured
  // slower (the A tiles' loads, not the B tiles', are what the multiplies wait on).
  const int nsb = p.in / 256, units = a.n_padded / kTileTokens * nsb;
  auto unit = [&](int u) { return Unit{u / nsb, u % nsb}; };
  auto x_at = [&](const Unit& w, int step) {
    return a.q.data() + static_cast<size_t>(w.tile) * kTileTokens * a.in + 256 * w.sb + 64 * step;
  };
  auto b_at = [&](const Unit& w, int step) { return p.q.data() + static_cast<size_t>(4 * w.sb + step) * 2 * 1024; };
  alignas(64) int32_t hs[2][kTileTokens][kTileRows], ls[2][kTileTokens][kTileRows];
  asm volatile("" ::: "memory");  // GCC's tile loads name only their address as read
  __m512 acc[kTileTokens];
  // A unit's float step, once its sums are stored; a tile's dots go out after its last.
  auto finish = [&](const Unit& w, int buf) __attribute__((always_inline)) {
    if (w.sb == 0) {
#pragma GCC unroll 16
      for (int t = 0; t < kTileTokens; ++t) acc[t] = _mm512_setzero_ps();
    }
    scale_super<HasMin>(acc, hs[buf], ls[buf], p, a, w.tile * kTileTokens, w.sb);
    if (w.sb == nsb - 1) {
      float* o = out + static_cast<size_t>(w.tile) * kTileTokens * kTileRows;
#pragma GCC unroll 16
      for (int t = 0; t < kTileTokens; ++t) _mm512_storeu_ps(o + t * kTileRows, acc[t]);
    }
  };
  // Each step's loads go one step ahead of its multiplies, a unit's first ahead of the last
  // unit's stores (a tile store holds up the loads after it until its multiply is done); a
  // unit's float step runs while the next unit's multiplies do.
  Unit w = unit(0), done{};
  load_step<0>(x_at(w, 0), stride, b_at(w, 0));
  for (int u = 0; u < units; ++u) {
    _tile_zero(KVLM_ST_CH);
    _tile_zero(KVLM_ST_CL);
    load_step<1>(x_at(w, 1), stride, b_at(w, 1));
    multiply_step<0>();
    load_step<0>(x_at(w, 2), stride, b_at(w, 2));
    multiply_step<1>();
    if (u > 0) finish(done, (u - 1) % 2);
    load_step<1>(x_at(w, 3), stride, b_at(w, 3));
    multiply_step<0>();
    const Unit next = u + 1 < units ? unit(u + 1) : w;
    if (u + 1 < units) load_step<0>(x_at(next, 0), stride, b_at(next, 0));
    multiply_step<1>();
    _tile_stored(KVLM_ST_CH, hs[u % 2], kTileRows * 4);
    _tile_stored(KVLM_ST_CL, ls[u % 2], kTileRows * 4);
    done = w;
    w = next;
  }
  finish(done, (units - 1) % 2);
}
}  // namespace

void pack_super_row_amx(const RowQuants& u, int i, int8_t* q) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(kTileRows * 4));  // quad j at j * 64 bytes
  const __m512i seven_bits = _mm512_set1_epi16(127);
  for (int st = 0; st < u.in / 64; ++st) {
    const int16_t* sc = u.scale + 4 * st;  // the step's four sixteens
    const __m512i s01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[0])), _mm256_set1_epi16(sc[1]), 1);
    const __m512i s23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[2])), _mm256_set1_epi16(sc[3]), 1);
    const __m512i w01 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 64 * st))), s01);
    const __m512i w23 = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.q + 64 * st + 32))), s23);
    const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(w01, 7))),
                                          _mm512_cvtepi16_epi8(_mm512_srai_epi16(w23, 7)), 1);
    const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_and_si512(w01, seven_bits))),
                                          _mm512_cvtepi16_epi8(_mm512_and_si512(w23, seven_bits)), 1);
    int8_t* dst = q + static_cast<size_t>(st) * 2 * 16 * kTileRows * 4 + i * 4;
    _mm512_i32scatter_epi32(dst, idx, hi, 1);
    _mm512_i32scatter_epi32(dst + 16 * kTileRows * 4, idx, lo, 1);
  }
}

void row_tile_multiply_amx(const RowTiles& p, const QuantizedActs& a, const float* act_sums, float* out) {
  if (p.block == 256) {
    p.has_min ? multiply_supers<true>(p, a, out) : multiply_supers<false>(p, a, out);
    return;
  }
  for (int t0 = 0; t0 < a.n_padded; t0 += kTileTokens)
    amx_multiply_blocks(p.q.data(), p.sv.data(), p.has_min ? p.mn.data() : nullptr, a, act_sums, t0,
                        reinterpret_cast<float(*)[kTileRows]>(out + static_cast<size_t>(t0) * kTileRows));
}

KVLM_AMX_TARGET_END

#else  // no tiles on this build

void pack_super_row_amx(const RowQuants&, int, int8_t*) { KVLM_CHECK(false, "AMX tiles asked for on a build without them"); }

void row_tile_multiply_amx(const RowTiles&, const QuantizedActs&, const float*, float*) {
  KVLM_CHECK(false, "AMX tiles asked for on a build without them");
}

#endif

}  // namespace kvlm
