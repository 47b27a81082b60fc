// core/amx_tiles.h — the AMX tile configuration of the AMX files (core/peak_amx.cc,
// gemm/mx_gemm_amx.cc): palette 1, all eight tiles 16 rows x 64 bytes. Include only from
// files compiled with the AMX flags (*_amx.cc); internal linkage, so each keeps its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mxtrain::amx {
namespace {

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile t
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Loads the configuration of eight tiles of 16 rows x 64 bytes into this thread's tile state.
// GCC's LDTILECFG intrinsic tells the compiler it reads 8 bytes only: the barrier keeps the
// stores of the whole configuration.
inline void load_tiles_16x64() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace
}  // namespace mxtrain::amx
