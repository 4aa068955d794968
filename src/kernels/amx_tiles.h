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
