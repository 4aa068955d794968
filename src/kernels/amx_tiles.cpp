#include "kernels/amx_tiles.h"

#include <cstring>

#include "core/error.h"

#if KVLM_AMX
#include <immintrin.h>
#endif

namespace kvlm {

#if KVLM_AMX
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("amx-tile"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("amx-tile")
#endif

namespace {
// The config this thread loaded last (palette 0: none, or released).
thread_local TileConfig t_loaded = [] {
  TileConfig c;
  c.palette = 0;
  return c;
}();
}  // namespace

void use_tile_config(const TileConfig& c) {
  if (std::memcmp(&t_loaded, &c, sizeof c) == 0) return;
  t_loaded = c;
  // GCC's ldtilecfg names only the config's first 8 bytes as read: keep every store before it.
  asm volatile("" ::: "memory");
  _tile_loadconfig(&t_loaded);
}

void release_tile_config() {
  _tile_release();
  t_loaded.palette = 0;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // no tiles on this build
void use_tile_config(const TileConfig&) { KVLM_CHECK(false, "AMX tiles asked for on a build without them"); }
void release_tile_config() {}
#endif

}  // namespace kvlm
