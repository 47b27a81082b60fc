// core/peak_amx.cc — the AMX-BF16 peak loop of mxtrain/peak.h (core/peak_kernels.h):
// TDPBF16PS on tiles, and Linux's permission request for the tile state. Compiled with the
// AMX flags; called only on CPUs with AMX-BF16 once amx_permission() returned true.
//
// Tiles: tmm0-3 are four 16x16 FP32 accumulators, tmm4-5 two A tiles (16 rows x 32 BF16),
// tmm6-7 two B tiles (16 rows of 16 BF16 pairs, i.e. 32x16 in the VNNI layout). One
// iteration is the 2x2 block product C[i][j] += A[i] · B[j]: four independent TDPBF16PS,
// each 16 x 16 x 32 = 8192 multiply-adds. A's even columns hold a0, its odd ones a1; B is b
// everywhere, so each C element grows by 16 (a0 + a1) b per instruction.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "core/amx_tiles.h"
#include "core/peak_kernels.h"

namespace mxtrain::kern {
namespace {

inline uint16_t bf16_bits(float x) { return uint16_t(__builtin_bit_cast(uint32_t, x) >> 16); }

double sum_tile(const float (&c)[16][16]) {
  double s = 0;
  for (const auto& row : c)
    for (float v : row) s += v;
  return s;
}

double amx_run(int64_t iters, float a0, float a1, float b) {
  alignas(64) uint16_t A[16][32], B[16][32];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 32; ++k) {
      A[r][k] = bf16_bits(k % 2 ? a1 : a0);
      B[r][k] = bf16_bits(b);
    }
  amx::load_tiles_16x64();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, A, 64);
  _tile_loadd(5, A, 64);
  _tile_loadd(6, B, 64);
  _tile_loadd(7, B, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float C[16][16];
  double s = 0;
  _tile_stored(0, C, 64);
  s += sum_tile(C);
  _tile_stored(1, C, 64);
  s += sum_tile(C);
  _tile_stored(2, C, 64);
  s += sum_tile(C);
  _tile_stored(3, C, 64);
  s += sum_tile(C);
  _tile_release();
  return s;
}

}  // namespace

const PeakLoop& peak_loop_amx_bf16() {
  static const PeakLoop l{PeakKind::amx_bf16, "tdpbf16ps tmm", 4, 8192.0, amx_run};
  return l;
}

bool amx_permission() {
  // Linux 5.16+: a process must ask before it may use the tile data state (XFEATURE 18).
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool granted =
      syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

}  // namespace mxtrain::kern
