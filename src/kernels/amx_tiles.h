// The AMX tile configuration of this thread, shared by the kernels that use the tiles (the
// quantized GEMM, the int8 attention): each names the shapes it wants, and the config is loaded
// only when it differs from the one loaded last on this thread. Loading it costs more than a
// 32-key piece of attention, which would otherwise load it at every call.
#pragma once
#include <cstdint>

#include "core/cpu.h"

// The tiles exist on x86-64 only, and have no emulation (the AVX-512 emulation build leaves them out).
#if KVLM_X86 && !KVLM_AVX512_EMULATION
#define KVLM_AMX 1
#else
#define KVLM_AMX 0
#endif

// What the tile kernels are compiled for, between KVLM_AMX_TARGET_BEGIN and KVLM_AMX_TARGET_END
// (GCC takes a target pragma, clang an attribute pragma). GCC's 512-bit conversions start from
// an undefined vector that -Wmaybe-uninitialized reports once inlined; nothing is read
// uninitialized (as attention_avx512.cpp).
#define KVLM_AMX_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8"
#if defined(__clang__)
#define KVLM_AMX_TARGET_BEGIN KVLM_PRAGMA(clang attribute push(__attribute__((target(KVLM_AMX_TARGET))), apply_to = function))
#define KVLM_AMX_TARGET_END _Pragma("clang attribute pop")
#else
#define KVLM_AMX_TARGET_BEGIN                                                                    \
  _Pragma("GCC push_options") KVLM_PRAGMA(GCC target(KVLM_AMX_TARGET)) _Pragma("GCC diagnostic push") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define KVLM_AMX_TARGET_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#endif

namespace kvlm {

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
  void set(int tile, int n_rows, int bytes) {
    rows[tile] = static_cast<uint8_t>(n_rows);
    bytes_per_row[tile] = static_cast<uint16_t>(bytes);
  }
};

// Makes c this thread's tile configuration (loading it unless it already is). Only where
// amx_usable() (qgemm_amx.h).
void use_tile_config(const TileConfig& c);
// Releases this thread's tiles (TILERELEASE); the next use_tile_config loads its config again.
void release_tile_config();

}  // namespace kvlm
