#include "kernels/qgemm_amx.h"

#include "core/cpu.h"
#include "core/buffer.h"
#include "core/error.h"
#include "kernels/amx_tiles.h"

#include <cstdint>
#include <cstring>

#if KVLM_AMX
#include <immintrin.h>
#endif

namespace kvlm {

bool amx_usable() { return KVLM_AMX && isa_at_least(Isa::Amx); }

#if KVLM_AMX

KVLM_AMX_TARGET_BEGIN
#if !defined(__clang__)
// Inlined into the templates, GCC reports the conversions' undefined start vector as plainly
// uninitialized as well (see KVLM_AMX_TARGET_BEGIN); popped with the target.
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace {
constexpr int kQuads = 8;                          // a block's 32 values as 8 quads: the B tile's rows
constexpr int kQuadBytes = kAmxRows * 4;           // one B-tile row: a quad of each of the 16 rows
constexpr size_t kTileBytes = kQuads * kQuadBytes;  // one block's B tile: 512 bytes

// The tile registers, by number (the intrinsics paste the number into the instruction): two sets,
// even blocks on the first, odd ones on the second.
#define KVLM_TILE_A0 0  // 16 tokens x 32 int8: one block of each token's activations
#define KVLM_TILE_B0 1  // 8 quads x (16 rows x 4 int8): the pair's block
#define KVLM_TILE_C0 2  // 16 tokens x 16 rows of int32: the block's sums
#define KVLM_TILE_A1 3
#define KVLM_TILE_B1 4
#define KVLM_TILE_C1 5

const TileConfig& gemm_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int a : {KVLM_TILE_A0, KVLM_TILE_A1}) t.set(a, kAmxTokens, 32);
    for (int b : {KVLM_TILE_B0, KVLM_TILE_B1}) t.set(b, kQuads, kQuadBytes);
    for (int x : {KVLM_TILE_C0, KVLM_TILE_C1}) t.set(x, kAmxTokens, kAmxRows * 4);
    return t;
  }();
  return c;
}

// Group g's 8 rows of one packed block into columns 8g..8g+7 of the pair's B tile. Q8_0: quad j
// is chunk j as it is. Q4_0: chunk j's low nibbles are quad j (values 4j..4j+3), its high nibbles
// quad j + 4 (values 16 + 4j..), both less the format's offset of 8.
void copy_into_tile(DType f, const uint8_t* blk, int g, int8_t* tile) {
  const uint8_t* q = blk + kPackedScaleBytes;
  int8_t* col = tile + g * kGroupRows * 4;
  if (f == DType::Q8_0) {
    for (int j = 0; j < kQuads; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + j * kQuadBytes),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j)));
    return;
  }
  const __m256i low = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
  for (int j = 0; j < 4; ++j) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j));
    const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(raw, low), eight);
    const __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), eight);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + j * kQuadBytes), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + (j + 4) * kQuadBytes), hi);
  }
}

// The pair's B tiles and f32 scales, block by block.
void build_tiles(DType f, const uint8_t* first, int groups, int nb, int8_t* tiles, float* scales) {
  const size_t bb = q_block_bytes(f);
  for (int b = 0; b < nb; ++b) {
    int8_t* tile = tiles + static_cast<size_t>(b) * kTileBytes;
    float* scale = scales + static_cast<size_t>(b) * kAmxRows;
    for (int g = 0; g < 2; ++g) {
      if (g < groups) {
        const uint8_t* blk = first + (static_cast<size_t>(g) * nb + b) * bb;
        copy_into_tile(f, blk, g, tile);
        _mm256_storeu_ps(scale + g * kGroupRows, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
      } else {  // the last group alone: zero rows, zero scales
        for (int j = 0; j < kQuads; ++j) std::memset(tile + j * kQuadBytes + g * kGroupRows * 4, 0, kGroupRows * 4);
        std::memset(scale + g * kGroupRows, 0, kGroupRows * sizeof(float));
      }
    }
  }
}

// This thread's scratch for the pair it holds: kept between pairs, so that a layer's hundreds of
// pairs do not each allocate (and fault in) fresh pages.
struct PairScratch {
  Buffer<int8_t> tiles;
  Buffer<float> scales;
  bool in_use = false;
};
thread_local PairScratch t_scratch;
}  // namespace

AmxGroupPair::AmxGroupPair(DType f, const uint8_t* first, int groups, int nb) : nb_(nb) {
  KVLM_CHECK(f == DType::Q8_0 || f == DType::Q4_0, "AMX multiplies Q8_0 or Q4_0, not ", dtype_name(f));
  KVLM_CHECK(groups == 1 || groups == 2, "an AMX pair is 1 or 2 groups, not ", groups);
  KVLM_CHECK(amx_usable(), "AMX tiles asked for where this thread may not use them");
  KVLM_CHECK(!t_scratch.in_use, "one AMX pair at a time per thread");
  if (t_scratch.tiles.size() < static_cast<size_t>(nb) * kTileBytes) {
    t_scratch.tiles.resize(static_cast<size_t>(nb) * kTileBytes);
    t_scratch.scales.resize(static_cast<size_t>(nb) * kAmxRows);
  }
  t_scratch.in_use = true;
  tiles_ = t_scratch.tiles.data();
  scales_ = t_scratch.scales.data();
  build_tiles(f, first, groups, nb, tiles_, scales_);
  use_tile_config(gemm_config());
}

AmxGroupPair::~AmxGroupPair() {
  release_tile_config();
  t_scratch.in_use = false;
}

void AmxGroupPair::multiply(const QuantizedActs& a, int t0, float out[kAmxTokens][kAmxRows]) const {
  KVLM_CHECK(t0 >= 0 && t0 + kAmxTokens <= a.n && a.nb == nb_, "AMX token tile out of range");
  amx_multiply_blocks(tiles_, scales_, nullptr, a, nullptr, t0, out);
}

namespace {
// Prefetch distance in blocks: the tile loads read L2 otherwise, and the tile unit waits on them.
constexpr int kAhead = 4;

void prefetch_lines(const int8_t* p, int bytes) {
  for (int l = 0; l < bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
}

// Block b's multiply on tile set Set (b % 2).
template <int Set>
__attribute__((always_inline)) inline void multiply_block(const int8_t* xq, long stride, const int8_t* tile) {
  prefetch_lines(tile + kAhead * kTileBytes, kTileBytes);
  // A token row's 64-byte line holds two blocks: fetch each line once.
  if ((reinterpret_cast<uintptr_t>(xq) & 63) < 32)
    for (int t = 0; t < kAmxTokens; ++t) _mm_prefetch(reinterpret_cast<const char*>(xq + t * stride + 64), _MM_HINT_T0);
  if constexpr (Set == 0) {
    _tile_loadd(KVLM_TILE_A0, xq, stride);
    _tile_loadd(KVLM_TILE_B0, tile, kQuadBytes);
    _tile_zero(KVLM_TILE_C0);
    _tile_dpbssd(KVLM_TILE_C0, KVLM_TILE_A0, KVLM_TILE_B0);
  } else {
    _tile_loadd(KVLM_TILE_A1, xq, stride);
    _tile_loadd(KVLM_TILE_B1, tile, kQuadBytes);
    _tile_zero(KVLM_TILE_C1);
    _tile_dpbssd(KVLM_TILE_C1, KVLM_TILE_A1, KVLM_TILE_B1);
  }
}

template <int Set>
__attribute__((always_inline)) inline void store_block(int32_t (*sums)[kAmxRows]) {
  if constexpr (Set == 0)
    _tile_stored(KVLM_TILE_C0, sums, kAmxRows * 4);
  else
    _tile_stored(KVLM_TILE_C1, sums, kAmxRows * 4);
}

// As the scalar twins: (weight scale x token scale), one fused multiply-add of the sum, then the
// min term's.
template <bool HasMin>
__attribute__((always_inline)) inline void scale_block(__m512 (&acc)[kAmxTokens], const int32_t (*sums)[kAmxRows],
                                                       const float* scales, const float* mins, const float* dx,
                                                       int dx_stride, const float* xs) {
  const __m512 s = _mm512_loadu_ps(scales);
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t)
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_set1_ps(dx[t * dx_stride])),
                             _mm512_cvtepi32_ps(_mm512_load_si512(sums[t])), acc[t]);
  if constexpr (HasMin) {
    const __m512 m = _mm512_loadu_ps(mins);
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(xs[t * dx_stride]), acc[t]);
  }
}

template <bool HasMin>
void multiply_blocks(const int8_t* tiles, const float* scales, const float* mins, const QuantizedActs& a,
                     const float* act_sums, int t0, float out[kAmxTokens][kAmxRows]) {
  use_tile_config(gemm_config());
  const int8_t* xq = a.q.data() + static_cast<size_t>(t0) * a.in;
  const float* xd = a.d.data() + static_cast<size_t>(t0) * a.nb;
  const float* xs = HasMin ? act_sums + static_cast<size_t>(t0) * a.nb : nullptr;
  const long stride = a.in;
  const int nb = a.nb;
  alignas(64) int32_t sums[2][kAmxTokens][kAmxRows];
  // GCC's tile loads name only their address as read: keep the B tiles' stores before them.
  asm volatile("" ::: "memory");
  // The unroll pragmas and the always-inline helpers keep the 16 sums in registers.
  __m512 acc[kAmxTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  auto scale = [&](int b, int set) __attribute__((always_inline)) {
    scale_block<HasMin>(acc, sums[set], scales + static_cast<size_t>(b) * kAmxRows,
                        HasMin ? mins + static_cast<size_t>(b) * kAmxRows : nullptr, xd + b, nb, HasMin ? xs + b : nullptr);
  };
  // Block b's multiply runs on tile set b % 2; its sums are stored once block b + 1's multiply is
  // under way, and scaled a step later still: a tile store holds up the loads after it until the
  // multiply it waits on is done (orders measured in docs/benchmarks.md, 34).
  multiply_block<0>(xq, stride, tiles);
  int b = 0;
  for (; b + 2 <= nb; b += 2) {  // b on set 0, b + 1 on set 1
    multiply_block<1>(xq + 32 * (b + 1), stride, tiles + (b + 1) * kTileBytes);
    store_block<0>(sums[0]);
    if (b > 0) scale(b - 1, 1);
    if (b + 2 < nb) multiply_block<0>(xq + 32 * (b + 2), stride, tiles + (b + 2) * kTileBytes);
    store_block<1>(sums[1]);
    scale(b, 0);
  }
  if (b < nb) {  // an odd count: the last on set 0, already multiplying
    store_block<0>(sums[0]);
    if (b > 0) scale(b - 1, 1);
    scale(b, 0);
  } else {
    scale(b - 1, 1);
  }
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) _mm512_storeu_ps(out[t], acc[t]);
}
}  // namespace

void amx_multiply_blocks(const int8_t* tiles, const float* scales, const float* mins, const QuantizedActs& a,
                         const float* act_sums, int t0, float out[kAmxTokens][kAmxRows]) {
  if (mins)
    multiply_blocks<true>(tiles, scales, mins, a, act_sums, t0, out);
  else
    multiply_blocks<false>(tiles, scales, nullptr, a, nullptr, t0, out);
}

KVLM_AMX_TARGET_END

#else  // no tiles on this build

AmxGroupPair::AmxGroupPair(DType, const uint8_t*, int, int nb) : nb_(nb) {
  KVLM_CHECK(false, "AMX tiles asked for on a build without them");
}
AmxGroupPair::~AmxGroupPair() = default;
void AmxGroupPair::multiply(const QuantizedActs&, int, float[kAmxTokens][kAmxRows]) const {}
void amx_multiply_blocks(const int8_t*, const float*, const float*, const QuantizedActs&, const float*, int,
                         float[kAmxTokens][kAmxRows]) {
  KVLM_CHECK(false, "AMX tiles asked for on a build without them");
}

#endif

}  // namespace kvlm
